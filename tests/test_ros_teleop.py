"""Teleop node as a real process, driven by joystick events written into a FIFO."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.ros.conversions import pose_from_msg, pose_to_msg, stamp_to_seconds  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402

pytestmark = pytest.mark.ros


def _js(value: int, kind: int, number: int) -> bytes:
    return struct.pack("<IhBB", 0, value, kind, number)


def test_gamepad_takes_over_moves_target_and_signals_events(tmp_path: Path) -> None:
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)
    launch_file = tmp_path / "teleop.launch.yaml"
    launch_file.write_text(f"""
launch:
- node:
    pkg: robot_rl
    exec: teleop_node
    name: teleop
    param:
    - {{name: device, value: gamepad}}
    - {{name: device_path, value: "{fifo}"}}
    - {{name: max_linear_speed, value: 0.2}}
""")
    targets: list[PoseStamped] = []
    intervention: list[bool] = []
    events: list[str] = []
    with launch(load_launch_file(launch_file)) as graph:
        rclpy.init()
        node = rclpy.create_node("teleop_test")
        writer = None
        try:
            latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            node.create_subscription(Bool, "/intervention", lambda m: intervention.append(m.data), latched)
            node.create_subscription(PoseStamped, "/teleop/target_pose", targets.append, 10)
            node.create_subscription(String, "/episode_event", lambda m: events.append(m.data), 10)
            pose_pub = node.create_publisher(PoseStamped, "/current_pose", 10)
            success = node.create_client(Trigger, "/teleop/success")

            def spin_until(cond, timeout=20.0):  # type: ignore[no-untyped-def]
                deadline = time.monotonic() + timeout
                while not cond() and time.monotonic() < deadline:
                    pose_pub.publish(pose_to_msg(np.array([0.4, 0.0, 0.3]), np.array([0, 1.0, 0, 0]),
                                                 time.time_ns(), "base"))
                    rclpy.spin_once(node, timeout_sec=0.02)
                return cond()

            assert spin_until(lambda: intervention == [False]), graph.log("teleop")
            writer = os.open(fifo, os.O_WRONLY)
            os.write(writer, _js(1, 0x01, 4) + _js(-32767, 0x02, 1))  # hold LB, left stick forward
            assert spin_until(lambda: intervention and intervention[-1] is True)
            assert spin_until(lambda: len(targets) > 30)
            first, last = pose_from_msg(targets[0]), pose_from_msg(targets[-1])
            dt = stamp_to_seconds(targets[-1].header.stamp) - stamp_to_seconds(targets[0].header.stamp)
            assert dt > 0.3
            speed = (last[0][0] - first[0][0]) / dt
            assert speed == pytest.approx(0.2, rel=0.25), speed  # 0.2 m/s along +x at full deflection
            assert abs(last[0][1]) < 1e-9 and last[0][2] == pytest.approx(0.3)
            np.testing.assert_allclose(np.abs(last[1]), [0, 1, 0, 0], atol=1e-9)  # orientation kept

            assert success.wait_for_service(timeout_sec=10)
            future = success.call_async(Trigger.Request())
            assert spin_until(lambda: future.done() and "success" in events)
            assert future.result().message == "success"

            os.write(writer, _js(0, 0x01, 4))  # release the dead-man button
            assert spin_until(lambda: intervention[-1] is False)
            n = len(targets)
            spin_until(lambda: False, timeout=0.5)
            assert len(targets) <= n + 1  # no more human targets once control is handed back
        finally:
            if writer is not None:
                os.close(writer)
            node.destroy_node()
            rclpy.shutdown()
