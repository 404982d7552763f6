"""The graph tests' wait helpers judge what they claim: a stream is steady only if no gap in the whole window."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")
from helpers.ros_spin import steady


def test_steady_needs_the_whole_window_without_a_gap() -> None:
    tick = [i * 0.002 for i in range(1000)]  # 500 Hz for 2 s
    assert steady(tick, 1.0, 0.05)
    assert not steady(tick[:400], 1.0, 0.05)  # not yet a full window of stream
    assert not steady([0.0, 0.01, 0.02, 1.5, 1.51], 1.0, 0.05)  # the gap reaches into the window from before it
    stalled = tick[:600] + [1.3 + i * 0.002 for i in range(400)]  # 0.1 s stall 0.8 s before the last arrival
    assert not steady(stalled, 1.0, 0.05)
    assert steady(tick[:600] + [1.3 + i * 0.002 for i in range(600)], 1.0, 0.05)  # the stall left the window
    assert not steady([], 1.0, 0.05)
