"""QoS profiles shared by every node, so publishers and subscribers of a topic always match.

``LATCHED`` (reliable, transient local, depth 1) carries state a late joiner must see at once:
intervention, e-stop, controller mode, policy version. ``EVENTS`` (reliable, depth 10) carries episode
events that must not be dropped. Sensor streams use rclpy's ``qos_profile_sensor_data``.
"""

from __future__ import annotations

import time

from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
EVENTS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


class RateLimitedWarnings:
    """Log each distinct warning at most once per ``period`` seconds.

    rclpy's ``throttle_duration_sec`` throttles per call site, so two different refusals logged from one
    callback would hide each other; this keys on the text instead.
    """

    def __init__(self, logger: RcutilsLogger, period: float = 1.0, max_keys: int = 256) -> None:
        self.logger = logger
        self.period = period
        self.max_keys = max_keys
        self._last: dict[str, float] = {}

    def __call__(self, text: str) -> None:
        """Warn with ``text`` unless the same text was logged less than ``period`` ago."""
        now = time.monotonic()
        if now - self._last.get(text, -1e9) >= self.period:
            if len(self._last) >= self.max_keys:
                self._last.clear()
            self._last[text] = now
            self.logger.warn(text)
