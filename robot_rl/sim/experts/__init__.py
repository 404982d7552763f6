"""Scripted experts: ``act(obs) -> action`` from any state, for demonstrations and simulated humans."""

from robot_rl.sim.experts.arm import PickLiftExpert, PushExpert, ReachExpert, expert_for

__all__ = ["PickLiftExpert", "PushExpert", "ReachExpert", "expert_for"]
