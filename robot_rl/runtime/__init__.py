"""The runtime: the one episode loop and the one policy runner that every driver uses.

Evaluation (:mod:`robot_rl.training.evaluate`), recording (:mod:`robot_rl.data.recorder`), ``robot-rl sim
rollout``, the online actors (:mod:`robot_rl.learners.actor_process`) and the ROS policy node all run
policies through :class:`PolicyRunner` and, in simulation, episodes through :func:`run_episode`; the ROS
graph labels its ticks with :class:`StepStream`. One definition of success, one labelling rule.
"""

from typing import Any

from robot_rl.runtime.episode import EpisodeHooks, EpisodeResult, act, run_episode, to_observation
from robot_rl.runtime.labels import SegmentLabeller
from robot_rl.runtime.step_stream import StepStream

__all__ = ["EpisodeHooks", "EpisodeResult", "PolicyRunner", "SegmentLabeller", "StepStream", "act", "run_episode",
           "to_observation"]


def __getattr__(name: str) -> Any:
    """``PolicyRunner`` imports torch: loaded on first use, so recording and the ROS adapters stay light."""
    if name == "PolicyRunner":
        from robot_rl.runtime.policy_runner import PolicyRunner

        return PolicyRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
