"""Scripted experts: ``act(obs) -> action`` from any state, for demonstrations and simulated humans."""

from robot_rl.sim.experts.arm import PickLiftExpert, PushExpert, ReachExpert, expert_for
from robot_rl.sim.experts.quad import HoverExpert

__all__ = ["HoverExpert", "PickLiftExpert", "PushExpert", "ReachExpert", "expert_for"]
