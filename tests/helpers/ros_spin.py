"""The wait loop every ROS graph test needs: spin a probe node until a condition holds or time runs out."""

from __future__ import annotations

import itertools
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


def graph_is_up(node: Node, names: list[str]) -> bool:
    """Whether every named node of a launched graph is on the ROS graph (its imports and set-up are done)."""
    return set(names) <= set(node.get_node_names())


def steady(arrivals: list[float], window_s: float, max_gap_s: float) -> bool:
    """Whether a stream stamped on arrival kept coming, no gap over ``max_gap_s``, for the last ``window_s``.

    Bring-up on a loaded 2-core machine starves processes for tenths of a second while the rest of the graph
    imports; a test that judges tracking or timeouts waits for this before it starts the clock.
    """
    start = arrivals[-1] - window_s if arrivals else 0.0
    if not arrivals or arrivals[0] > start:
        return False
    for later, earlier in itertools.pairwise(reversed(arrivals)):  # newest first, through the window's start
        if later - earlier > max_gap_s:
            return False
        if earlier < start:
            return True
    return True
