"""QoS profiles shared by every node, so publishers and subscribers of a topic always match.

``LATCHED`` (reliable, transient local, depth 1) carries state a late joiner must see at once:
intervention, e-stop, controller mode, policy version. ``EVENTS`` (reliable, depth 10) carries episode
events that must not be dropped. Sensor streams use rclpy's ``qos_profile_sensor_data``.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Callable

from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
EVENTS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


class RateLimitedWarnings:
    """Log warnings at a bounded rate: each key at most once per ``period``, all keys at most ``max_lines``.

    A barrage of bad messages (a policy streaming NaN targets at 1 kHz) must not flood the log, yet two
    different refusals from one callback must not hide each other, as rclpy's per-call-site
    ``throttle_duration_sec`` would make them. A warning is keyed by its text with the numbers masked (the
    offending values change from message to message, the reason does not); suppressed lines are counted
    into the next line of the same key.
    """

    def __init__(self, logger: RcutilsLogger, period: float = 1.0, max_keys: int = 256, max_lines: int = 10,
                 clock: Callable[[], float] = time.monotonic, level: str = "warning") -> None:
        if period <= 0 or max_keys < 1 or max_lines < 1:
            raise ValueError("RateLimitedWarnings: period, max_keys and max_lines must be positive")
        if level not in ("warning", "error"):
            raise ValueError(f"RateLimitedWarnings: level must be warning or error, got {level!r}")
        self.logger = logger
        self.level = level
        """The severity of every line: ``error`` for faults that stop the robot acting (a dead policy)."""
        self.period = period
        self.max_keys = max_keys
        self.max_lines = max_lines
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._recent: deque[float] = deque()

    def __call__(self, text: str, key: str | None = None) -> bool:
        """Warn with ``text`` unless its ``key`` (default: the text, numbers masked) or the budget forbids.

        A key logged less than ``period`` ago, or ``max_lines`` lines in the last ``period``, suppress it.
        Returns whether a line was written.
        """
        now = self.clock()
        key = _NUMBER.sub("#", text) if key is None else key
        while self._recent and now - self._recent[0] >= self.period:
            self._recent.popleft()
        if now - self._last.get(key, -math.inf) < self.period or len(self._recent) >= self.max_lines:
            if key in self._suppressed or len(self._suppressed) < self.max_keys:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= self.max_keys:
            self._last.clear()
        self._last[key] = now
        self._recent.append(now)
        skipped = self._suppressed.pop(key, 0)
        getattr(self.logger, self.level)(text + (f" ({skipped} similar suppressed)" if skipped else ""))
        return True
