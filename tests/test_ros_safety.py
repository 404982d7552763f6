"""Safety node as a real process: e-stop/reset services, latched state, stale-topic e-stop, diagnostics."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.ros.conversions import joint_state_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402

pytestmark = pytest.mark.ros


def test_estop_reset_and_stale_topic(tmp_path: Path) -> None:
    path = tmp_path / "safety.launch.yaml"
    path.write_text("""
launch:
- node:
    pkg: robot_rl
    exec: safety_node
    name: safety
    param:
    - {name: max_age_s, value: [0.3]}
    - {name: diagnostics_hz, value: 5.0}
""")
    estop: list[bool] = []
    diags: list[DiagnosticArray] = []
    with launch(load_launch_file(path)) as graph:
        rclpy.init()
        node = rclpy.create_node("safety_test")
        try:
            latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=DurabilityPolicy.TRANSIENT_LOCAL)
            node.create_subscription(Bool, "/safety/estop", lambda m: estop.append(m.data), latched)
            node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
            js = node.create_publisher(JointState, "/joint_states", 10)
            stop_client = node.create_client(Trigger, "/safety/estop")
            reset_client = node.create_client(Trigger, "/safety/reset")
            publishing = [True]

            def spin_until(cond, timeout=20.0):  # type: ignore[no-untyped-def]
                deadline = time.monotonic() + timeout
                while not cond() and time.monotonic() < deadline:
                    if publishing[0]:
                        js.publish(joint_state_to_msg(["j1"], np.zeros(1), stamp_ns=time.time_ns()))
                    rclpy.spin_once(node, timeout_sec=0.02)
                return cond()

            def call(client):  # type: ignore[no-untyped-def]
                assert client.wait_for_service(timeout_sec=10)
                future = client.call_async(Trigger.Request())
                assert spin_until(future.done), graph.log("safety")
                return future.result()

            assert spin_until(lambda: estop and estop[-1] is False), graph.log("safety")
            assert call(stop_client).success and spin_until(lambda: estop[-1] is True)
            n = len(diags)
            assert spin_until(lambda: len(diags) > n)
            status = {s.name: s for s in diags[-1].status}
            assert status["robot_rl/safety/estop"].level == DiagnosticStatus.ERROR
            assert status["robot_rl/topic/joint_states"].level == DiagnosticStatus.OK
            assert call(reset_client).success and spin_until(lambda: estop[-1] is False)

            publishing[0] = False  # the joint-state driver "crashes"
            t0 = time.monotonic()
            assert spin_until(lambda: estop[-1] is True, timeout=5)
            assert time.monotonic() - t0 < 1.0  # 0.3 s max age + 50 ms check period + delivery
            refused = call(reset_client)
            assert not refused.success and "stale" in refused.message
            assert "stale topic(s): joint_states" in graph.log("safety")
        finally:
            node.destroy_node()
            rclpy.shutdown()
