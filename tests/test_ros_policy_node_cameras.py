"""Policy node fed by real-robot cameras: JPEG CompressedImage streams at the camera's own size are decoded,
resized to the policy's and acted on; undecodable frames are skipped with a reason, the node keeps acting."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
from helpers.ros_spin import spin_until  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import CompressedImage, JointState  # noqa: E402

from robot_rl.policies.base import PolicySpec  # noqa: E402
from robot_rl.policies.chunking import ExecutorConfig  # noqa: E402
from robot_rl.policies.flow import FlowConfig, FlowPolicy  # noqa: E402
from robot_rl.robots import panda  # noqa: E402
from robot_rl.ros.conversions import compressed_image_to_msg, joint_state_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file, write_node_launch_file  # noqa: E402

pytestmark = pytest.mark.ros


def _pixel_policy(path: Path) -> Path:
    torch.manual_seed(0)
    config = FlowConfig(horizon=8, unet_channels=(16, 32), num_inference_steps=2, image_feature_dim=16,
                        executor=ExecutorConfig(n_action_steps=4))
    spec = PolicySpec({"joint_pos": 7}, {"image_front": (24, 24, 3), "image_wrist": (24, 24, 3)}, 8,
                      control_mode="joint_position")
    policy = FlowPolicy(config, spec)
    lim = np.full(8, 0.1)
    policy.set_stats({"joint_pos": {"min": -np.ones(7) * 3, "max": np.ones(7) * 3, "mean": np.zeros(7),
                                    "std": np.ones(7)},
                      "action": {"min": -lim, "max": lim, "mean": np.zeros(8), "std": lim}})
    return policy.save(path)


@pytest.mark.slow
def test_policy_node_acts_on_compressed_frames_of_another_size(tmp_path: Path) -> None:
    ckpt = _pixel_policy(tmp_path / "policy")
    path = write_node_launch_file(tmp_path / "policy.launch.yaml", "policy_node",
                                  {"policy_path": str(ckpt), "rate_hz": 10.0, "robot": "panda",
                                   "image_transport": "compressed"})
    targets: list[JointState] = []
    with launch(load_launch_file(path), tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("camera_feed")
        try:
            node.create_subscription(JointState, "/target_joint", targets.append, 10)
            js = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
            cams = {c: node.create_publisher(CompressedImage, f"/{c}/image_raw/compressed", qos_profile_sensor_data)
                    for c in ("front", "wrist")}
            rng = np.random.default_rng(0)
            names = [*panda.JOINT_NAMES, *panda.GRIPPER_JOINTS]
            corrupt = False

            def feed() -> None:
                now = time.time_ns()
                js.publish(joint_state_to_msg(names, np.r_[panda.HOME_Q, 0.04, 0.04], np.zeros(9), np.zeros(9), now))
                for cam, pub in cams.items():
                    msg = compressed_image_to_msg(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8), now, cam)
                    if corrupt and cam == "wrist":
                        msg.data = b"\xff\xd8 not a jpeg"
                    pub.publish(msg)

            def spin(seconds: float, until=None) -> bool:  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until, tick=feed, tick_period=0.05)

            assert spin(60, until=lambda: len(targets) > 5 or not graph.is_running("policy")), graph.log("policy")
            assert len(targets) > 5, graph.log("policy")
            first = targets[-1]
            assert list(first.name[:7]) == list(panda.JOINT_NAMES) and np.all(np.isfinite(first.position))
            corrupt = True
            refusal = "skipping wrist/image_raw/compressed: compressed image: cannot decode"
            assert spin(10, until=lambda: refusal in graph.log("policy")), graph.log("policy")
            # the last good wrist frame goes stale: after camera_timeout_s (1 s) the node holds, saying why
            assert spin(10, until=lambda: "holding: image_wrist silent for" in graph.log("policy")), \
                graph.log("policy")[-2000:]
            spin(0.3)
            n = len(targets)
            spin(1.0)
            assert len(targets) == n and graph.is_running("policy")  # nothing acted on the stale frame
            corrupt = False
            assert spin(10, until=lambda: len(targets) > n + 3), graph.log("policy")[-2000:]  # frames back: acting
        finally:
            node.destroy_node()
            rclpy.shutdown()
