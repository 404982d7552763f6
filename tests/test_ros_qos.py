"""Rejected targets are logged at a bounded rate: a flood of bad messages writes a handful of lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped

from robot_rl.control import PoseTarget, SafetyLayer, build_controller
from robot_rl.robots import panda
from robot_rl.ros.conversions import pose_to_msg
from robot_rl.ros.qos import RateLimitedWarnings
from robot_rl.ros.target_conversions import subscribe_targets


class FakeLogger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, text: str) -> None:
        self.lines.append(text)

    def error(self, text: str) -> None:
        self.lines.append("ERROR " + text)


class FakeNode:
    """Collects the subscription callbacks subscribe_targets creates, so a test can call them directly."""

    def __init__(self) -> None:
        self.callbacks: dict[str, Callable[[Any], None]] = {}

    def create_subscription(self, msg_type: type, topic: str, callback: Callable[[Any], None], qos: int) -> None:
        self.callbacks[topic] = callback


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_keys_budget_and_counts_suppressed_lines() -> None:
    log, clock = FakeLogger(), Clock()
    warn = RateLimitedWarnings(log, period=1.0, max_lines=3, clock=clock)  # type: ignore[arg-type]
    assert warn("a 1", "a") and not warn("a 2", "a")  # same key within the period: suppressed
    assert warn("b", "b") and warn("c", "c")
    assert not warn("d", "d")  # 3 lines in this period: the budget is spent, whatever the key
    clock.now = 1.0
    assert warn("a 3", "a")
    assert log.lines == ["a 1", "b", "c", "a 3 (1 similar suppressed)"]
    clock.now = 1.5
    for i in range(1000):  # the values in the text differ, the reason does not: one line per period
        warn(f"rejected target_pose: position [{i * 0.1:.3f}, -{i}, {i}e-3] outside")
    warn("rejected target_pose: contains NaN")  # another reason on the same topic is not hidden
    assert len(log.lines) == 6 and log.lines[-1].endswith("NaN")


def test_a_dead_policy_reported_on_every_tick_is_logged_once_per_second_as_an_error() -> None:
    log, clock = FakeLogger(), Clock()
    errors = RateLimitedWarnings(log, clock=clock, level="error")  # type: ignore[arg-type]
    for tick in range(30):  # 3 s of a 10 Hz inference loop whose policy process died
        clock.now = tick * 0.1
        errors("chunk rejected: the LeRobot child process died (signal 9)")
    assert log.lines == ["ERROR chunk rejected: the LeRobot child process died (signal 9)",
                         "ERROR chunk rejected: the LeRobot child process died (signal 9) (9 similar suppressed)",
                         "ERROR chunk rejected: the LeRobot child process died (signal 9) (9 similar suppressed)"]
    with pytest.raises(ValueError, match="level"):
        RateLimitedWarnings(log, level="info")  # type: ignore[arg-type]


def test_a_flood_of_bad_targets_logs_a_bounded_number_of_lines() -> None:
    model = panda.load_model()
    controller = build_controller("panda", model)
    assert isinstance(controller, SafetyLayer)
    log, clock = FakeLogger(), Clock()
    warn = RateLimitedWarnings(log, clock=clock)  # type: ignore[arg-type]
    node = FakeNode()
    subscribe_targets(node, panda.JOINT_NAMES, lambda m: PoseTarget(*_pose(m)),  # type: ignore[arg-type]
                      lambda target, source: controller.submit(target, 0.0, source),
                      lambda: controller.status.reason, warn)
    quat = np.array([0.0, 1.0, 0.0, 0.0])
    for i in range(2000):  # out of the box, each at another position: every one refused
        clock.now = i * 1e-3  # a 1 kHz barrage for 2 s
        node.callbacks["target_pose"](pose_to_msg(np.array([0.5, 0.0, 1.0 + i * 1e-4]), quat, 0, "base"))
        node.callbacks["teleop/target_pose"](pose_to_msg(np.array([np.nan, 0.0, 0.3]), quat, 0, "base"))
    assert controller.status.rejected == 2000  # the NaN poses were refused before reaching it
    assert 2 <= len(log.lines) <= 6, log.lines  # about one line per reason per second
    assert any("outside the workspace box" in line and "suppressed" in line for line in log.lines)


def _pose(msg: PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    p, o = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z]), np.array([o.w, o.x, o.y, o.z])
