"""The sim-arm graph from its launch file, as real processes: reach, watchdog, bad input, e-stop; and what
RViz reads of it: robot_description naming every joint, /tf whose chain base -> tcp is current_pose."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_frames import HAS_TF, FramesProbe, same_rotation, undocumented_topics, urdf_joint_names  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.robots import panda  # noqa: E402
from robot_rl.ros.conversions import pose_from_msg, pose_to_msg, stamp_to_ns, stamp_to_seconds  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class Probe:
    """The outside node: publishes targets, watches pose, mode and joint states."""

    def __init__(self) -> None:
        self.node = rclpy.create_node("graph_probe")
        self.pose: tuple[np.ndarray, np.ndarray] | None = None
        self.pose_stamp = 0.0
        self.poses: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        """current_pose by stamp [ns] (the last few hundred)."""
        self.frames = FramesProbe(self.node)
        self.modes: list[str] = []
        self.joint_msgs = 0
        self.node.create_subscription(PoseStamped, "/current_pose", self._on_pose, 10)
        self.node.create_subscription(String, "/controller/mode", lambda m: self.modes.append(m.data), LATCHED)
        self.node.create_subscription(JointState, "/joint_states", self._on_joints, 10)
        self.target = self.node.create_publisher(PoseStamped, "/target_pose", 10)
        self.bad_joint = self.node.create_publisher(JointState, "/target_joint", 10)
        self.estop = self.node.create_client(Trigger, "/safety/estop")

    def _on_pose(self, msg: PoseStamped) -> None:
        self.pose, self.pose_stamp = pose_from_msg(msg), stamp_to_seconds(msg.header.stamp)
        self.poses[stamp_to_ns(msg.header.stamp)] = self.pose
        if len(self.poses) > 500:
            del self.poses[min(self.poses)]

    def check_frames(self) -> None:
        """robot_description names every joint; at a stamp of current_pose, /tf + /tf_static compose to it."""
        assert self.frames.description is not None
        assert set(panda.JOINT_NAMES + panda.GRIPPER_JOINTS) <= set(urdf_joint_names(self.frames.description))
        if not HAS_TF:
            return
        assert self.frames.static["tcp"][0] == "hand"  # the tool frame is fixed to the hand
        common = sorted(set(self.poses) & set(self.frames.stamps("link7")))
        assert common, (sorted(self.poses)[-3:], self.frames.stamps("link7")[-3:])
        for stamp in common[-20:]:
            pos, quat = self.frames.lookup("base", "tcp", stamp)
            np.testing.assert_allclose(pos, self.poses[stamp][0], atol=1e-6)
            assert same_rotation(quat, self.poses[stamp][1])

    def _on_joints(self, _msg: JointState) -> None:
        self.joint_msgs += 1

    def spin_for(self, seconds: float, publish: np.ndarray | None = None, quat: np.ndarray | None = None,
                 until=None) -> bool:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + seconds
        next_pub = 0.0
        while time.monotonic() < deadline:
            if publish is not None and time.monotonic() >= next_pub:
                self.target.publish(pose_to_msg(publish, quat, time.time_ns(), "base"))
                next_pub = time.monotonic() + 0.05  # 20 Hz policy
            rclpy.spin_once(self.node, timeout_sec=0.01)
            if until is not None and until():
                return True
        return until is None


def test_sim_arm_graph(tmp_path: Path) -> None:
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)  # the teleop node reads a gamepad that nobody touches
    description = load_launch_file("sim_arm_teleop.launch.yaml", {
        "teleop_device": "gamepad", "teleop_device_path": str(fifo), "cameras": "[]", "record": "false"})
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        probe = Probe()
        try:
            assert probe.spin_for(60, until=lambda: probe.pose is not None and probe.modes), graph.log("sim")
            assert probe.modes[-1] == "hold"
            start, quat = probe.pose
            goal = start + np.array([0.06, 0.05, -0.08])

            # 1. an outside node streams target_pose: the arm gets there
            def error() -> float:
                return float(np.linalg.norm(probe.pose[0] - goal))
            assert probe.spin_for(30, publish=goal, quat=quat, until=lambda: error() < 0.005), \
                f"error {error():.4f} m\n{graph.log('sim')}"
            assert "active" in probe.modes and "blending" in probe.modes
            held_at = probe.pose[0].copy()
            assert probe.spin_for(10, until=probe.frames.ready)
            probe.check_frames()  # while the arm moved: every joint of the chain in /tf
            assert not undocumented_topics(probe.node)  # the README's table (robot_rl.ros.topics) has them all

            # 2. the target publisher dies: the watchdog holds (0.5 s of sim time), the arm stays put
            assert probe.spin_for(10, until=lambda: probe.modes[-1] == "hold"), probe.modes
            probe.spin_for(1.0)
            assert np.linalg.norm(probe.pose[0] - held_at) < 0.01
            assert graph.wait_for_log("sim", "stale target")

            # 3. malformed targets are refused with a reason; the graph keeps running
            nan_target = pose_to_msg(goal, quat, time.time_ns(), "base")
            nan_target.pose.position.x = float("nan")
            probe.target.publish(nan_target)
            bad = JointState(name=["elbow", "wrist"], position=[0.1, 0.2])
            probe.bad_joint.publish(bad)
            far = pose_to_msg(goal + np.array([0.0, 0.0, 5.0]), quat, time.time_ns(), "base")
            probe.target.publish(far)
            n = probe.joint_msgs
            probe.spin_for(1.5)
            log = graph.log("sim")
            assert "rejected target_pose: PoseStamped: contains NaN" in log
            assert "rejected target_joint: missing joints" in log
            assert "outside the workspace box" in log
            assert probe.joint_msgs > n + 50 and graph.is_running("sim") and graph.is_running("safety")
            assert np.linalg.norm(probe.pose[0] - held_at) < 0.01  # nothing moved the arm

            # 4. e-stop: the controller stops, new targets are refused, the arm does not follow them
            assert probe.estop.wait_for_service(timeout_sec=10)
            future = probe.estop.call_async(Trigger.Request())
            assert probe.spin_for(10, until=lambda: future.done() and probe.modes[-1] == "estop"), probe.modes
            before = probe.pose[0].copy()
            away = before + np.array([-0.1, 0.0, 0.05])
            probe.spin_for(2.0, publish=away, quat=quat)
            assert np.linalg.norm(probe.pose[0] - away) > 0.09  # did not go to the new target
            assert graph.wait_for_log("sim", "e-stop engaged")
        finally:
            probe.node.destroy_node()
            rclpy.shutdown()
        codes = graph.shutdown()
    assert all(code in (0, -2) for code in codes.values()), codes  # clean exits on SIGINT
