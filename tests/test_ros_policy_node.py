"""Policy node on the sim graph: streams targets at its rate, hot-swaps versioned weights, refuses bad ones."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Int64, String  # noqa: E402

from robot_rl.policies.base import PolicySpec  # noqa: E402
from robot_rl.policies.chunking import ExecutorConfig  # noqa: E402
from robot_rl.policies.flow import FlowConfig, FlowPolicy  # noqa: E402
from robot_rl.ros.conversions import pose_from_msg, stamp_to_seconds  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.teleop_node import LATCHED  # noqa: E402
from robot_rl.runtime.arm_actions import WORKSPACE_HIGH, WORKSPACE_LOW  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _policy(action_dim: int = 7, seed: int = 0) -> FlowPolicy:
    torch.manual_seed(seed)
    config = FlowConfig(horizon=16, unet_channels=(32, 64), num_inference_steps=4,
                        executor=ExecutorConfig(n_action_steps=8))
    policy = FlowPolicy(config, PolicySpec({"joint_pos": 7, "tcp_pos": 3}, {}, action_dim,
                                           control_mode="cartesian_delta"))
    lim = np.full(action_dim, 0.3)
    policy.set_stats({"joint_pos": {"min": -np.ones(7) * 3, "max": np.ones(7) * 3, "mean": np.zeros(7),
                                    "std": np.ones(7)},
                      "tcp_pos": {"min": np.zeros(3), "max": np.ones(3), "mean": np.zeros(3) + 0.5, "std": np.ones(3)},
                      "action": {"min": -lim, "max": lim, "mean": np.zeros(action_dim), "std": lim}})
    return policy


def test_policy_node_streams_swaps_and_refuses(tmp_path: Path) -> None:
    ckpt = _policy().save(tmp_path / "policy")
    weights = tmp_path / "weights"
    weights.mkdir()
    fifo = tmp_path / "js0"
    os.mkfifo(fifo)
    description = load_launch_file("sim_arm_policy.launch.yaml", {
        "policy_path": str(ckpt), "weights_dir": str(weights), "teleop_device": "gamepad",
        "teleop_device_path": str(fifo), "record": "false"})
    targets: list[tuple[float, PoseStamped]] = []
    versions: list[int] = []
    modes: list[str] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("policy_probe")
        try:
            node.create_subscription(PoseStamped, "/target_pose", lambda m: targets.append((time.monotonic(), m)), 10)
            node.create_subscription(Int64, "/policy/version", lambda m: versions.append(m.data), LATCHED)
            node.create_subscription(String, "/controller/mode", lambda m: modes.append(m.data), LATCHED)

            def spin(seconds, until=None):  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until)

            assert spin(60, until=lambda: len(targets) > 5), graph.log("policy")
            assert versions[-1] == 0
            n0, t0 = len(targets), time.monotonic()
            spin(3.0)
            rate = (len(targets) - n0) / (time.monotonic() - t0)
            assert 8.0 <= rate <= 12.0, rate  # 10 Hz while chunks are predicted on the worker thread
            gaps = np.diff([t for t, _ in targets[n0:]])
            assert gaps.max() < 0.35, gaps.max()  # no stall of the stream at chunk boundaries
            for _, msg in targets[-20:]:
                position, _ = pose_from_msg(msg)
                assert np.all(position >= WORKSPACE_LOW - 1e-6) and np.all(position <= WORKSPACE_HIGH + 1e-6)
            stamps = [stamp_to_seconds(m.header.stamp) for _, m in targets]
            assert np.all(np.diff(stamps) >= 0)
            assert "active" in modes or "blending" in modes  # the sim's safety layer accepts the stream

            _policy(seed=1).save(weights / "v5")  # a learner publishes new weights
            assert spin(20, until=lambda: versions[-1] == 5), graph.log("policy")
            assert spin(5, until=lambda: "swapped in weights v5" in graph.log("policy"))

            _policy(action_dim=8, seed=2).save(weights / "v7")  # wrong shape: must be refused
            assert spin(15, until=lambda: "refused weights" in graph.log("policy"))
            spin(1.0)
            assert versions[-1] == 5 and graph.is_running("policy")
            n1 = len(targets)
            spin(1.0)
            assert len(targets) > n1 + 5  # still acting on v5
        finally:
            node.destroy_node()
            rclpy.shutdown()
