"""Target gate in front of a CRISP-like controller (the sim node plays CRISP): forward, hold, e-stop."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402

from robot_rl.ros.conversions import pose_from_msg, pose_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.teleop_node import LATCHED  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

GRAPH = """
launch:
- node: {pkg: robot_rl, exec: sim_node, name: crisp_standin, param: [{name: with_object, value: false}]}
- node: {pkg: robot_rl, exec: target_gate_node, name: target_gate}
"""


def test_gate_forwards_holds_on_stale_and_estop(tmp_path: Path) -> None:
    path = tmp_path / "gate.launch.yaml"
    path.write_text(GRAPH)
    states: list[str] = []
    pose: list[np.ndarray] = []
    with launch(load_launch_file(path), tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("gate_probe")
        try:
            node.create_subscription(String, "/target_gate/state", lambda m: states.append(m.data), LATCHED)
            node.create_subscription(PoseStamped, "/current_pose", lambda m: pose.append(pose_from_msg(m)[0]), 10)
            policy = node.create_publisher(PoseStamped, "/policy/target_pose", 10)
            human = node.create_publisher(PoseStamped, "/teleop/target_pose", 10)
            intervention = node.create_publisher(Bool, "/intervention", LATCHED)
            estop = node.create_publisher(Bool, "/safety/estop", LATCHED)
            quat = np.array([0.0, 1.0, 0.0, 0.0])

            def spin(seconds, pub=None, goal=None, until=None):  # type: ignore[no-untyped-def]
                publish = None if pub is None else lambda: pub.publish(pose_to_msg(goal, quat, time.time_ns(), "base"))
                return spin_until(node, seconds, until, publish, tick_period=0.1)

            assert spin(60, until=lambda: len(pose) > 5 and states), graph.log("target_gate")
            start = pose[-1].copy()
            goal = start + np.array([0.05, 0.05, -0.05])
            assert spin(20, policy, goal, until=lambda: np.linalg.norm(pose[-1] - goal) < 0.005)
            assert "forwarding policy" in states
            bad = start + np.array([0.0, 0.0, 5.0])  # out of the box: refused, the good target stays
            spin(1.0, policy, bad)
            assert np.linalg.norm(pose[-1] - goal) < 0.005 and "outside the workspace box" in graph.log("target_gate")

            assert spin(5, until=lambda: states[-1] == "hold (policy stale)")  # the policy stops talking
            spin(1.0)
            assert np.linalg.norm(pose[-1] - goal) < 0.01
            assert "stale target" not in graph.log("crisp_standin")  # the gate keeps CRISP fed

            intervention.publish(Bool(data=True))  # the human takes over and moves the arm
            goal2 = goal + np.array([-0.05, 0.0, 0.05])
            assert spin(20, human, goal2, until=lambda: np.linalg.norm(pose[-1] - goal2) < 0.005)
            assert "forwarding human" in states
            estop.publish(Bool(data=True))
            assert spin(5, human, goal, until=lambda: states[-1] == "estop")
            spin(1.5, human, goal)  # human targets no longer reach the arm
            assert np.linalg.norm(pose[-1] - goal2) < 0.01
        finally:
            node.destroy_node()
            rclpy.shutdown()
