"""Turn a live stream of samples into episodes: the recorder behind the ROS recorder node.

A live robot gives, at a fixed rate, an observation, the action in force and who produced it (policy,
human or script); it gives no (s, a, s') tuples and no episode boundaries. :class:`StreamRecorder`
pairs consecutive samples into :class:`~robot_rl.core.transition.Transition` records (the action of
sample t with the observations of t and t+1), numbers control segments (a new ``segment_id`` each time
control changes hands, so interventions can be credited per segment), and ends episodes on events:
``success`` / ``failure`` commit (terminal), ``stop`` commits (truncated), ``rerecord`` discards the
take without leaving frames behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.store import EpisodeStore, EpisodeWriter


@dataclass
class _Sample:
    obs: dict[str, np.ndarray]
    action: np.ndarray
    source: SegmentSource
    stamp: float
    policy_action: np.ndarray | None
    policy_version: int


class StreamRecorder:
    """Appends a stream of samples to an :class:`EpisodeStore` as episodes."""

    def __init__(self, store: EpisodeStore, task: str | None = None, max_steps: int = 10_000) -> None:
        self.store = store
        self.task = task
        self.max_steps = max_steps
        self.writer: EpisodeWriter | None = None
        self._prev: _Sample | None = None
        self._segment = 0
        self._steps = 0
        self.committed: list[tuple[int, bool | None, int]] = []
        """(store index, success, steps) of every episode committed by this recorder."""
        self.discarded = 0
        """Takes thrown away (re-record)."""

    @property
    def recording(self) -> bool:
        """Whether an episode is open."""
        return self.writer is not None

    @property
    def steps(self) -> int:
        """Transitions written to the open episode."""
        return self._steps

    def add(self, obs: Mapping[str, np.ndarray], action: np.ndarray, source: SegmentSource | str, stamp: float,
            policy_action: np.ndarray | None = None, policy_version: int = -1) -> None:
        """One sample at time ``stamp``: the observation and the action in force from then on."""
        sample = _Sample({k: np.asarray(v) for k, v in obs.items()}, np.asarray(action, dtype=np.float32),
                         SegmentSource(source), float(stamp), policy_action, policy_version)
        if self.writer is None:
            self.writer = self.store.begin_episode(task=self.task)
            self._prev, self._segment, self._steps = None, 0, 0
        prev = self._prev
        if prev is not None:
            try:
                self._write(prev, sample.obs, sample.stamp, terminated=False, truncated=False)
            except OSError:  # the writer discarded the take (disk full): the next sample starts a new one
                self.writer, self._prev = None, None
                raise
            if sample.source != prev.source:
                self._segment += 1
        self._prev = sample
        if self._steps >= self.max_steps:
            self.end("stop")

    def _write(self, prev: _Sample, next_obs: dict[str, np.ndarray], next_stamp: float, terminated: bool,
               truncated: bool) -> None:
        assert self.writer is not None
        human = prev.source is SegmentSource.HUMAN
        self.writer.add(Transition(
            observation=prev.obs, next_observation=next_obs, action=prev.action, reward=0.0,
            terminated=terminated, truncated=truncated, episode_id=self.writer.episode_id, step=self._steps,
            policy_action=None if prev.policy_action is None else np.asarray(prev.policy_action, np.float32),
            is_intervention=human, segment_source=prev.source, segment_id=self._segment,
            policy_version=prev.policy_version, obs_stamp=prev.stamp, next_obs_stamp=max(next_stamp, prev.stamp),
        ))
        self._steps += 1

    def end(self, event: str) -> int | None:
        """End the open episode on ``success``, ``failure``, ``stop`` or ``rerecord``; returns its index.

        The last sample becomes the final transition (terminal on success/failure, truncated on stop,
        its next observation its own observation). An episode without any transition is dropped.
        """
        if event not in ("success", "failure", "stop", "rerecord"):
            raise ValueError(f"unknown episode event {event!r}")
        writer, prev = self.writer, self._prev
        self.writer, self._prev = None, None
        if writer is None:
            return None
        if event == "rerecord" or prev is None:
            writer.discard()
            self.discarded += event == "rerecord"
            return None
        self.writer = writer
        self._write(prev, prev.obs, prev.stamp, terminated=event != "stop", truncated=event == "stop")
        self.writer = None
        success = {"success": True, "failure": False}.get(event)
        index = writer.commit(success=success)
        self.committed.append((index, success, self._steps))
        return index

    def close(self) -> None:
        """Commit an open episode as truncated (e.g. at shutdown)."""
        if self.writer is not None:
            self.end("stop")
