"""Controller node against emulated torque-interface hardware, brought up from real_arm.launch.yaml."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_spin import graph_is_up, spin_until, steady  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.robots.panda import HOME_Q  # noqa: E402
from robot_rl.ros.conversions import joint_state_to_msg, pose_from_msg, pose_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402

pytestmark = pytest.mark.ros
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.mark.slow
def test_controller_node_drives_emulated_arm_and_fails_safe(tmp_path: Path) -> None:
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)
    description = load_launch_file("real_arm.launch.yaml", {
        "emulate": "true", "with_camera": "false", "teleop_device": "gamepad",
        "teleop_device_path": str(fifo), "controller_rate_hz": "250.0"})
    poses: list[np.ndarray] = []
    states: list[float] = []  # arrival times of the hardware's joint_states
    modes: list[str] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("controller_probe")
        try:
            node.create_subscription(PoseStamped, "/current_pose", lambda m: poses.append(pose_from_msg(m)[0]), 10)
            node.create_subscription(JointState, "/joint_states", lambda m: states.append(time.monotonic()), 10)
            node.create_subscription(String, "/controller/mode", lambda m: modes.append(m.data), LATCHED)
            target = node.create_publisher(PoseStamped, "/target_pose", 10)

            def spin(seconds, goal=None, quat=None, until=None):  # type: ignore[no-untyped-def]
                publish = None if goal is None else lambda: target.publish(pose_to_msg(goal, quat, time.time_ns(),
                                                                                      "base"))
                return spin_until(node, seconds, until, publish)

            assert spin(60, until=lambda: len(poses) > 10 and modes), graph.log("controller")
            # The whole graph up and the hardware's 500 Hz stream steady for 1 s: CI once starved the emulated
            # hardware 0.2 s while the rest of the graph was still importing, and the controller rightly latched
            # its stale-state e-stop in the middle of the move.
            assert spin(60, until=lambda: graph_is_up(node, graph.names)), (graph.names, node.get_node_names())
            assert spin(60, until=lambda: steady(states, 1.0, 0.05)), graph.log("controller")
            # one owner per topic: the emulated hardware publishes what a driver does, the controller the rest
            assert node.count_publishers("/current_pose") == node.count_publishers("/controller/mode") == 1
            # Bring-up as an operator does it: clear whatever a start-up stall of the hardware latched.
            reset = node.create_client(Trigger, "/safety/reset")
            assert reset.wait_for_service(timeout_sec=10)
            future = reset.call_async(Trigger.Request())
            assert spin(10, until=lambda: future.done() and modes[-1] == "hold"), (modes, graph.log("controller"))
            start = poses[-1].copy()
            quat = np.array([0.0, 1.0, 0.0, 0.0])  # tcp pointing down, as at the home pose
            goal = start + np.array([0.05, -0.05, -0.05])
            # reached: inside the settled band below (a 2-core machine under load can keep the tool oscillating
            # ~2 cm about the goal, so "within 1 cm at some instant" failed there once after 30 s)
            reached = spin(30, goal, quat, until=lambda: np.linalg.norm(poses[-1] - goal) < 0.03)
            assert reached, f"error {np.linalg.norm(poses[-1] - goal):.4f}\n{graph.log('controller')}"
            assert spin(5, goal, quat, until=lambda: "active" in modes), modes  # the 1 s blend-in completes
            n = len(poses)
            spin(1.0, goal, quat)
            errors = [np.linalg.norm(p - goal) for p in poses[n:]]
            # settled band: ~0.5 cm a second after the blend-in on 2 cores (the first samples can still be on the
            # way in under load, hence the max). It was 3 cm (and failed one run in
            # two) while the emulated hardware dropped the arm under gravity before the controller's first
            # command, so the test started from a falling arm; the hardware now brakes until commanded.
            assert errors and np.median(errors) < 0.015 and max(errors) < 0.05, (np.median(errors), max(errors))

            graph.kill("hardware")  # the robot driver dies: joint_states stop
            assert spin(10, until=lambda: modes[-1] == "estop"), modes
            assert spin(5, until=lambda: "joint_states stale" in graph.log("controller")), graph.log("controller")
            assert graph.is_running("controller")
        finally:
            node.destroy_node()
            rclpy.shutdown()


def test_a_starved_tick_zeroes_the_torques_until_fresh_joint_states_or_a_state_timeout() -> None:
    """The node's own starvation (its tick ran late, joint_states still queued) must not latch the e-stop; a
    joint_states feed that really stopped still latches it, one state timeout after the wake-up or at a
    second late tick."""
    from robot_rl.ros.controller_node import ControllerNode

    rclpy.init()
    try:
        node = ControllerNode()
        clock = [100.0]
        node._now = lambda: clock[0]  # type: ignore[method-assign]
        sent: list[list[float]] = []
        node.pub_cmd.publish = lambda msg: sent.append(list(msg.data))  # type: ignore[method-assign]
        names = list(node.embodiment.joint_names)

        def measure() -> None:
            node._on_joint_states(joint_state_to_msg(names, HOME_Q, np.zeros(len(names))))

        def tick(after_s: float) -> str:
            clock[0] += after_s
            node._tick()
            return str(node.controller.mode.value)

        measure()
        assert tick(0.002) != "estop" and np.any(np.abs(sent[-1]) > 0)  # gravity compensation at home
        assert tick(0.2) != "estop" and not np.any(sent[-1])  # starved 0.2 s (timeout 0.05 s): zeros, no latch
        measure()  # the queued message, taken before the next tick
        assert tick(0.002) != "estop" and np.any(np.abs(sent[-1]) > 0)
        assert tick(0.2) != "estop"  # starved again, and this time nothing was queued:
        assert [tick(0.004) for _ in range(12)].count("estop") == 0 and not np.any(sent[-1])  # zeros for 48 ms
        assert tick(0.004) == "estop" and not np.any(sent[-1])  # 52 ms after the wake-up (timeout 50 ms)
        assert "joint_states stale" in node.controller.status.reason
        node.destroy_node()

        node = ControllerNode()  # a node that is always late still judges: the second late tick latches
        node._now = lambda: clock[0]  # type: ignore[method-assign]
        measure()
        assert tick(0.002) != "estop" and tick(0.2) != "estop" and tick(0.2) == "estop"
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
