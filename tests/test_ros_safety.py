"""Safety node as a real process: e-stop/reset services, latched state, stale-topic e-stop, diagnostics."""

from __future__ import annotations

import signal
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
ARM_AFTER_S = 2.0
"""SafetyNodeConfig.arm_after_s's default: how long a topic must have been alive before its silence latches."""
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def safety_launch_file(tmp_path: Path, diagnostics_hz: float) -> Path:
    """A launch file of the safety node alone, watching joint_states with a 0.3 s max age."""
    path = tmp_path / "safety.launch.yaml"
    path.write_text(f"""
launch:
- node:
    pkg: robot_rl
    exec: safety_node
    name: safety
    param:
    - {{name: max_age_s, value: [0.3]}}
    - {{name: diagnostics_hz, value: {diagnostics_hz}}}
""")
    return path


def test_estop_reset_and_stale_topic(tmp_path: Path) -> None:
    path = safety_launch_file(tmp_path, diagnostics_hz=5.0)
    estop: list[bool] = []
    diags: list[DiagnosticArray] = []
    with launch(load_launch_file(path)) as graph:
        rclpy.init()
        node = rclpy.create_node("safety_test")
        try:
            node.create_subscription(Bool, "/safety/estop", lambda m: estop.append(m.data), LATCHED)
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

            # The safety node itself starved for 1 s (SIGSTOP) while the topic stayed alive: no e-stop.
            spin_until(lambda: False, timeout=ARM_AFTER_S)
            graph.kill("safety", signal.SIGSTOP)
            try:
                spin_until(lambda: False, timeout=1.0)
            finally:
                graph.kill("safety", signal.SIGCONT)
            spin_until(lambda: False, timeout=0.5)
            assert estop[-1] is False, graph.log("safety")
            assert spin_until(lambda: "this node was starved" in graph.log("safety")), graph.log("safety")

            publishing[0] = False  # the joint-state driver "crashes"
            t0 = time.monotonic()
            assert spin_until(lambda: estop[-1] is True, timeout=5)
            assert time.monotonic() - t0 < 1.0  # 0.3 s max age + 50 ms check period + delivery
            refused = call(reset_client)
            assert not refused.success and "stale" in refused.message
            assert spin_until(lambda: "stale topic(s): joint_states" in graph.log("safety")), graph.log("safety")
        finally:
            node.destroy_node()
            rclpy.shutdown()


@pytest.mark.slow
def test_a_topic_that_stalls_at_bring_up_does_not_latch_the_estop(tmp_path: Path) -> None:
    """A driver that stalls in its first seconds (a loaded machine starting a graph) holds, not e-stops;
    once it has been alive for arm_after_s, the same stall latches the e-stop."""
    path = safety_launch_file(tmp_path, diagnostics_hz=10.0)
    estop: list[bool] = []
    topic_status: list[str] = []
    with launch(load_launch_file(path)) as graph:
        rclpy.init()
        node = rclpy.create_node("safety_bring_up_test")
        try:
            node.create_subscription(Bool, "/safety/estop", lambda m: estop.append(m.data), LATCHED)
            node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: topic_status.extend(
                s.message for s in m.status if s.name == "robot_rl/topic/joint_states"), 10)
            js = node.create_publisher(JointState, "/joint_states", 10)

            def run(seconds: float, publish: bool) -> None:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    if publish:
                        js.publish(joint_state_to_msg(["j1"], np.zeros(1), stamp_ns=time.time_ns()))
                    rclpy.spin_once(node, timeout_sec=0.02)

            deadline = time.monotonic() + 20
            while not (estop and topic_status) and time.monotonic() < deadline:
                run(0.05, publish=False)
            assert estop == [False] and topic_status[-1] == "no message yet", graph.log("safety")
            run(0.5, publish=True)  # alive for 0.5 s ...
            assert topic_status[-1] == "starting"
            run(1.0, publish=False)  # ... then a 1 s stall (> max_age 0.3 s)
            assert estop[-1] is False and topic_status[-1] == "stale", graph.log("safety")
            assert graph.wait_for_log("safety", "went silent during bring-up"), graph.log("safety")
            run(ARM_AFTER_S + 0.5, publish=True)  # alive long enough: armed
            assert estop[-1] is False and topic_status[-1] == "alive"
            stalled = time.monotonic()
            deadline = stalled + 5
            while not estop[-1] and time.monotonic() < deadline:
                run(0.02, publish=False)
            assert estop[-1] is True and time.monotonic() - stalled < 1.0, graph.log("safety")
        finally:
            node.destroy_node()
            rclpy.shutdown()
