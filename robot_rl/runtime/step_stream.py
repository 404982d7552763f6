"""Turn a stream of ticks (as a ROS node sees them) into labelled Transitions for the learner.

In simulation, :func:`robot_rl.runtime.episode.run_episode` knows each step's action, reward and end.
On a ROS graph a node only sees, at each tick, the current observation, what the policy proposed and
whether the human holds the intervention switch. :class:`StepStream` pairs consecutive ticks into
``(obs, action, next_obs)`` with who acted, segment ids that change when control changes hands,
episode ids from episode events, and the weights version. While the human acts, the executed action
is not a command the node sent: it is relabelled from the tool's measured motion in the policy's own
action space (``relabel``), so HG-DAgger learns what the human actually did. A tick may also carry the
action of a frozen base policy (residual RL), stored as ``base_action``. Pure Python: no rclpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.runtime.labels import SegmentLabeller

Relabel = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray], float], np.ndarray]
"""(observation before, observation after, human gripper command 0..1) -> the executed action."""


class StepStream:
    """Call :meth:`tick` once per control period; :meth:`end_episode` on success / failure events."""

    def __init__(self, relabel: Relabel, episode_id: int = 0) -> None:
        self.relabel = relabel
        self.episode_id = episode_id
        self._prev: tuple[dict[str, np.ndarray], np.ndarray, bool, int, int, float, np.ndarray | None] | None = None
        self._step = 0
        self.labels = SegmentLabeller()

    def tick(self, obs: Mapping[str, np.ndarray], proposal: np.ndarray, human: bool, version: int,
             human_gripper: float = 1.0, stamp: float = 0.0,
             base_action: np.ndarray | None = None) -> Transition | None:
        """The step that ended at this tick (None on the first tick of an episode).

        ``base_action``: what a frozen base proposed at this tick (residual RL), kept with the step it opens.
        """
        obs = {k: np.asarray(v) for k, v in obs.items()}
        out = self._close(obs, 0.0, terminated=False, truncated=False, human_gripper=human_gripper, stamp=stamp)
        segment = self.labels.label(SegmentSource.HUMAN if human else SegmentSource.POLICY)
        base = None if base_action is None else np.asarray(base_action, np.float32).copy()
        self._prev = (obs, np.asarray(proposal, np.float32), human, segment, int(version), stamp, base)
        return out

    def end_episode(self, obs: Mapping[str, np.ndarray], success: bool, human_gripper: float = 1.0,
                    stamp: float = 0.0) -> Transition | None:
        """Close the episode at ``obs``: success terminates with reward 1, anything else truncates."""
        obs = {k: np.asarray(v) for k, v in obs.items()}
        out = self._close(obs, float(success), terminated=success, truncated=not success,
                          human_gripper=human_gripper, stamp=stamp)
        self._new_episode()
        return out

    def discard_episode(self) -> None:
        """A re-recorded take: drop the open step and start a new episode id."""
        self._new_episode()

    def _new_episode(self) -> None:
        self._prev, self._step = None, 0
        self.labels.reset()
        self.episode_id += 1

    def _close(self, nxt: dict[str, np.ndarray], reward: float, terminated: bool, truncated: bool,
               human_gripper: float, stamp: float) -> Transition | None:
        if self._prev is None:
            return None
        obs, proposal, human, segment, version, prev_stamp, base = self._prev
        if set(obs) != set(nxt):
            return None  # an input appeared or vanished between ticks: no consistent step to report
        action = (np.asarray(self.relabel(obs, nxt, human_gripper), np.float32) if human
                  else np.clip(proposal, -1.0, 1.0).astype(np.float32))
        t = Transition(observation=obs, next_observation=nxt, action=action, reward=reward, terminated=terminated,
                       truncated=truncated, episode_id=self.episode_id, step=self._step,
                       policy_action=proposal if np.all(np.isfinite(proposal)) else None,
                       base_action=base if base is not None and np.all(np.isfinite(base)) else None,
                       is_intervention=human, segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY,
                       segment_id=segment, policy_version=version, obs_stamp=prev_stamp,
                       next_obs_stamp=max(stamp, prev_stamp))
        self._step += 1
        return t
