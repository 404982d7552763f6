"""The wait loop every ROS graph test needs: spin a probe node until a condition holds or time runs out."""

from __future__ import annotations

import time
from collections.abc import Callable

import rclpy
from rclpy.node import Node


def spin_until(node: Node, seconds: float, until: Callable[[], object] | None = None,
               tick: Callable[[], None] | None = None, tick_period: float = 0.05) -> bool:
    """Spin ``node`` for up to ``seconds``, calling ``tick`` (e.g. a publish) every ``tick_period``.

    Returns True as soon as ``until()`` holds; False when time runs out (always False without ``until``).
    """
    deadline, next_tick = time.monotonic() + seconds, 0.0
    while time.monotonic() < deadline:
        if tick is not None and time.monotonic() >= next_tick:
            tick()
            next_tick = time.monotonic() + tick_period
        rclpy.spin_once(node, timeout_sec=0.01)
        if until is not None and until():
            return True
    return False
