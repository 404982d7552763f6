"""kp/kd over ROS: ``target_joint_gains`` (latched JointState: position = kp, velocity = kd) gives every later
``target_joint`` its gains, in the sim node and the controller node alike; bad gains are refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.ros_spin import spin_until  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robot_rl.control.targets import JointTarget  # noqa: E402
from robot_rl.robots import g1  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402
from robot_rl.ros.target_conversions import subscribe_targets  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.realtime("none")]  # in-process nodes, callbacks called directly


def _msg(names: list[str], position: np.ndarray, velocity: np.ndarray | None = None) -> JointState:
    msg = JointState()
    msg.name = names
    msg.position = [float(v) for v in position]
    if velocity is not None:
        msg.velocity = [float(v) for v in velocity]
    return msg


def test_latched_gains_reach_every_later_joint_target() -> None:
    rclpy.init()
    robot, probe = rclpy.create_node("gains_robot"), rclpy.create_node("gains_probe")
    try:
        got: list[JointTarget] = []
        warnings: list[str] = []
        names = list(g1.JOINT_NAMES)
        subscribe_targets(robot, names, lambda m: None, lambda t, s: got.append(t) is None, lambda: "", warnings.append)
        gains = probe.create_publisher(JointState, "/target_joint_gains", LATCHED)
        joint = probe.create_publisher(JointState, "/target_joint", 10)

        def spin(until) -> bool:  # type: ignore[no-untyped-def]
            return spin_until(robot, 10, until, tick=lambda: rclpy.spin_once(probe, timeout_sec=0))

        joint.publish(_msg(names, np.zeros(29)))
        assert spin(lambda: len(got) == 1) and got[0].kp is None  # no gains yet: the controller's own
        kp, kd = np.linspace(20, 200, 29), np.linspace(1, 5, 29)
        gains.publish(_msg(names[::-1], kp[::-1], kd[::-1]))  # by name, in any order
        for i in range(20):  # the latched gains arrive on their own subscription; targets after them carry them
            n = len(got)
            joint.publish(_msg(names, np.full(29, 0.01 * i)))
            if spin(lambda n=n: len(got) > n) and got[-1].kp is not None:
                break
        np.testing.assert_allclose(got[-1].kp, kp)
        np.testing.assert_allclose(got[-1].kd, kd)
        gains.publish(_msg(names, -kp, kd))  # negative stiffness: refused, the previous gains stay
        assert spin(lambda: any("rejected target_joint_gains" in w for w in warnings)), warnings
        gains.publish(_msg(names[:5], kp[:5], kd[:5]))
        assert spin(lambda: any("missing" in w for w in warnings)), warnings
        n = len(got)
        joint.publish(_msg(names, np.zeros(29)))
        assert spin(lambda: len(got) > n)
        np.testing.assert_allclose(got[-1].kp, kp)
    finally:
        robot.destroy_node()
        probe.destroy_node()
        rclpy.shutdown()
