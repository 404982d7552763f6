"""Who acted at each step: segment ids and takeovers, the one labelling rule of every loop.

A rollout mixes policy and human control. Learners that blame or imitate by segment (HG-DAgger,
HABC-style credit) need a ``segment_id`` that changes exactly when control changes hands, and
operators want the number of takeovers. The simulated episode loop and the ROS tick stream both label
through :class:`SegmentLabeller`, so a step means the same thing wherever it was recorded.
"""

from __future__ import annotations

from robot_rl.core.transition import SegmentSource


class SegmentLabeller:
    """Call :meth:`label` once per step with who acted; :meth:`reset` at every episode start."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """New episode: segment 0, no takeover yet."""
        self.segment = 0
        self.takeovers = 0
        self.human_steps = 0
        self._last: SegmentSource | None = None

    def label(self, source: SegmentSource) -> int:
        """The segment id of this step; a change of source opens a new segment.

        A takeover is counted whenever the human gains control, including at the very first step.
        """
        human = source is SegmentSource.HUMAN
        if self._last is not None and source != self._last:
            self.segment += 1
        if human and self._last is not SegmentSource.HUMAN:
            self.takeovers += 1
        self.human_steps += int(human)
        self._last = source
        return self.segment
