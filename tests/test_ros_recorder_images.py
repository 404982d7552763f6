"""Recorder node with a compressed camera stream: frames resized to the stored size, undecodable ones refused with a
reason while the node keeps recording."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from sensor_msgs.msg import CompressedImage, JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robot_rl.data.store import EpisodeStore  # noqa: E402
from robot_rl.robots import panda  # noqa: E402
from robot_rl.ros.conversions import compressed_image_to_msg, joint_state_to_msg, pose_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.qos import EVENTS  # noqa: E402

pytestmark = pytest.mark.ros


def test_compressed_frames_are_resized_and_corrupt_ones_refused(tmp_path: Path) -> None:
    dataset = tmp_path / "cam.zarr"
    path = tmp_path / "rec.launch.yaml"
    path.write_text(f"""
launch:
- node:
    pkg: robot_rl
    exec: recorder_node
    name: recorder
    param:
    - {{name: dataset, value: "{dataset}"}}
    - {{name: cameras, value: [wrist/image_raw/compressed]}}
    - {{name: image_width, value: 8}}
    - {{name: image_height, value: 8}}
    - {{name: rate_hz, value: 20.0}}
""")
    with launch(load_launch_file(path), tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("recorder_feed")
        try:
            js = node.create_publisher(JointState, "/joint_states", 10)
            pose = node.create_publisher(PoseStamped, "/current_pose", 10)
            image = node.create_publisher(CompressedImage, "/wrist/image_raw/compressed", 10)
            events = node.create_publisher(String, "/episode_event", EVENTS)
            names = [*panda.JOINT_NAMES, *panda.GRIPPER_JOINTS]
            rng = np.random.default_rng(0)

            def feed(seconds: float, corrupt: bool = False, until=None) -> bool:  # type: ignore[no-untyped-def]
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    if until is not None and until():
                        return True
                    now = time.time_ns()
                    js.publish(joint_state_to_msg(names, np.zeros(9), np.zeros(9), np.zeros(9), now))
                    pose.publish(pose_to_msg(np.array([0.5, 0, 0.4]), np.array([0, 1.0, 0, 0]), now, "base"))
                    frame = compressed_image_to_msg(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8), now, "wrist")
                    if corrupt:
                        frame.data = frame.data[: len(frame.data) // 8]  # a truncated JPEG
                    image.publish(frame)
                    rclpy.spin_once(node, timeout_sec=0.02)
                return until is None

            deadline = time.monotonic() + 30
            while image.get_subscription_count() == 0 and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.05)
            feed(3.0)
            refusal = "skipping wrist/image_raw/compressed: compressed image: cannot decode"
            assert feed(10.0, corrupt=True, until=lambda: refusal in graph.log("recorder")), graph.log("recorder")
            assert graph.is_running("recorder")
            feed(1.0)
            events.publish(String(data="success"))
            deadline = time.monotonic() + 10
            while "success: committed" not in graph.log("recorder") and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.05)
        finally:
            node.destroy_node()
            rclpy.shutdown()
    with EpisodeStore.open(dataset) as store:
        assert store.num_episodes >= 1 and store.episode_info(0).success is True
        frames = store.read_episode(0)
        key = next(k for k in frames if k.endswith("wrist"))
        assert frames[key].shape[1:] == (8, 8, 3) and frames[key].shape[0] > 30
