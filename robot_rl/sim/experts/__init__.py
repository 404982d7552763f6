"""Scripted experts: ``act(obs) -> action`` from any state, for demonstrations and simulated humans."""

from robot_rl.sim.experts.arm import MultiTaskExpert, PickLiftExpert, PushExpert, ReachExpert, expert_for
from robot_rl.sim.experts.humanoid import BalanceExpert
from robot_rl.sim.experts.humanoid_walk import WalkingController, WalkParams
from robot_rl.sim.experts.quad import HoverExpert

__all__ = ["BalanceExpert", "HoverExpert", "MultiTaskExpert", "PickLiftExpert", "PushExpert", "ReachExpert",
           "WalkParams", "WalkingController", "expert_for"]
