"""The one staleness watchdog and the one pose-target check, shared by every loop that guards a robot.

The safety layer (inside every controller), the ROS safety node (stale topics) and the target gate
(CRISP's target stream) all ask the same two questions: "is this stream still alive?" and "may this
pose go to the robot?". Answering them here once keeps their timeouts and workspace rules identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from robot_rl.control.base import TargetRejected
from robot_rl.control.targets import FlightTarget, PoseTarget
from robot_rl.core.config import ConfigError


class Watchdog:
    """Age of the last stamp fed in, against a timeout; stamps are in any one clock (sim or monotonic)."""

    def __init__(self, timeout: float) -> None:
        if not (math.isfinite(timeout) and timeout > 0):
            raise ConfigError(f"Watchdog.timeout: must be a positive finite time, got {timeout}")
        self.timeout = float(timeout)
        self.last: float | None = None

    def feed(self, stamp: float) -> None:
        """The stream spoke at ``stamp``."""
        self.last = float(stamp)

    def clear(self) -> None:
        """Forget the last stamp (a new source must speak first)."""
        self.last = None

    @property
    def fed(self) -> bool:
        """Whether anything was fed since construction or :meth:`clear`."""
        return self.last is not None

    def age(self, now: float) -> float:
        """Seconds since the last feed: inf if never fed, or if the clock jumped back past the last feed.

        A sim clock reset (more than the timeout back) must not keep a stale stream looking fresh until it
        catches up; a smaller step back counts as age 0.
        """
        if self.last is None or now < self.last - self.timeout:
            return math.inf
        return max(0.0, now - self.last)

    def stale(self, now: float) -> bool:
        """Silent for longer than the timeout, or never heard from."""
        return self.age(now) > self.timeout

    def went_silent(self, now: float) -> bool:
        """Was alive once and is stale now (a stream that never started is not a fault of this kind)."""
        return self.last is not None and self.stale(now)


class StarvationGuard:
    """Tells a stream that went silent from a periodic check that ran late because its own process starved.

    A node that was stopped (SIGSTOP, a loaded machine) wakes with messages still queued while its
    watchdogs have aged: judging at its first late tick would blame a live stream. The first late tick after
    an on-time one opens a grace window; within it a watchdog not fed since the window opened is excused for
    its own timeout, so a stream that stays silent is judged one timeout after the wake-up (and a fresh
    message ends the excuse at once). Consecutive late ticks do not reopen the window: a node that is always
    late still judges.
    """

    def __init__(self, late_after_s: float) -> None:
        if not (math.isfinite(late_after_s) and late_after_s > 0):
            raise ConfigError(f"StarvationGuard.late_after_s: must be a positive finite time, got {late_after_s}")
        self.late_after_s = float(late_after_s)
        self._last_tick: float | None = None
        self._was_late = False
        self.opened_at: float | None = None
        """When the last grace window opened (None: never)."""

    def tick(self, now: float) -> float | None:
        """Record a check at ``now``; the gap since the previous check if it opens a grace window, else None."""
        gap = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        late, opens = gap > self.late_after_s, gap > self.late_after_s and not self._was_late
        self._was_late = late
        if opens:
            self.opened_at = now
            return gap
        return None

    def excused(self, watchdog: Watchdog, now: float) -> bool:
        """Whether ``watchdog``'s silence is still this node's own fault (in the window, not fed since)."""
        opened = self.opened_at
        return (opened is not None and now - opened <= watchdog.timeout
                and (watchdog.last is None or watchdog.last < opened))


@dataclass(frozen=True)
class WorkspaceBox:
    """Axis-aligned box [m] in the base frame that tool or vehicle positions must stay inside."""

    low: tuple[float, float, float]
    """Lower corner."""
    high: tuple[float, float, float]
    """Upper corner."""
    low_array: np.ndarray = field(init=False, repr=False, compare=False)
    """The lower corner as an array (derived; do not modify)."""
    high_array: np.ndarray = field(init=False, repr=False, compare=False)
    """The upper corner as an array (derived; do not modify)."""

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.low, dtype=np.float64), np.asarray(self.high, dtype=np.float64)
        if lo.shape != (3,) or hi.shape != (3,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ConfigError(f"WorkspaceBox: needs 3 finite values per corner, got {self.low}, {self.high}")
        if np.any(lo >= hi):
            raise ConfigError("WorkspaceBox.low: must be below high on every axis")
        object.__setattr__(self, "low", tuple(float(v) for v in lo))
        object.__setattr__(self, "high", tuple(float(v) for v in hi))
        object.__setattr__(self, "low_array", lo)
        object.__setattr__(self, "high_array", hi)

    def contains(self, position: np.ndarray) -> bool:
        """Whether ``position`` lies inside (boundary included)."""
        return bool(np.all(position >= self.low_array) and np.all(position <= self.high_array))

    def clip(self, position: np.ndarray) -> np.ndarray:
        """``position`` moved onto the nearest point of the box."""
        return np.clip(position, self.low_array, self.high_array)


T = TypeVar("T", bound=PoseTarget | FlightTarget)


def check_pose_target(target: T, box: WorkspaceBox | None, clip: bool = False) -> T:
    """``target`` if its position is inside ``box`` (or clipped into it with ``clip``).

    Finiteness and the unit quaternion are checked when the target is built (:class:`PoseTarget`).

    Raises:
        TargetRejected: naming the position and the box.
    """
    if box is None or box.contains(target.position):
        return target
    if clip:
        return replace(target, position=box.clip(target.position))
    raise TargetRejected(f"{type(target).__name__}.position {np.round(target.position, 3).tolist()} "
                         f"outside the workspace box {list(box.low)}..{list(box.high)}")
