"""A pixel policy on the ROS graph (issue 20): a flow policy with two 64x64 cameras and the auxiliary object_pos
head survives a checkpoint round trip, and the real policy node runs it from two Image streams at its rate,
its actions following what the cameras show."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from rclpy.qos import qos_profile_sensor_data  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from std_msgs.msg import Float64, Float64MultiArray  # noqa: E402

from robot_rl.policies.base import Policy, PolicySpec  # noqa: E402
from robot_rl.policies.chunking import ExecutorConfig  # noqa: E402
from robot_rl.policies.flow import FlowConfig, FlowPolicy  # noqa: E402
from robot_rl.robots import panda  # noqa: E402
from robot_rl.ros.conversions import image_to_msg, joint_state_to_msg, pose_from_msg, pose_to_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file, write_node_launch_file  # noqa: E402
from robot_rl.runtime.arm_actions import MAX_LIN_SPEED, WORKSPACE_HIGH, WORKSPACE_LOW  # noqa: E402

pytestmark = pytest.mark.ros

STATE = {"joint_pos": 7, "joint_vel": 7, "gripper_width": 1, "tcp_pos": 3, "tcp_quat": 4}
CAMERAS = ("front", "wrist")
FINGERS = np.array([0.04, 0.04])
TCP_POS, TCP_QUAT = np.array([0.5, 0.0, 0.3]), np.array([0.0, 1.0, 0.0, 0.0])
RATE_HZ = 10.0


def _pixel_policy() -> FlowPolicy:
    """The pixel pick-and-lift policy's shape (config/policies/flow_pick_lift_pixels.yaml: one observation step,
    clean-chunk output, one Euler step, the newest chunk's first 2 actions, aux head on object_pos), random weights.

    The U-Net's first layer is zeroed so that the chunk ignores its starting noise, and the image features are
    scaled up: a chunk is then a function of the observation alone, and an action tells which images it saw.
    """
    torch.manual_seed(0)
    config = FlowConfig(n_obs_steps=1, horizon=16, unet_channels=(32, 64), prediction="sample", num_inference_steps=1,
                        executor=ExecutorConfig(mode="latest", n_action_steps=2),
                        image_keys=[f"image_{c}" for c in CAMERAS], image_feature_dim=32, crop_pad=3,
                        aux_keys=["object_pos"])
    spec = PolicySpec(STATE, {f"image_{c}": (64, 64, 3) for c in CAMERAS}, 7, robot=panda.NAME,
                      control_mode="cartesian_delta", aux_dims={"object_pos": 3})
    policy = FlowPolicy(config, spec)
    box = {"joint_pos": (-3.0, 3.0), "joint_vel": (-2.0, 2.0), "gripper_width": (0.0, 0.08), "tcp_pos": (0.0, 0.8),
           "tcp_quat": (-1.0, 1.0), "object_pos": (0.0, 0.6), "action": (-1.0, 1.0)}
    dims = {**STATE, "object_pos": 3, "action": 7}
    policy.set_stats({k: {"min": np.full(d, box[k][0]), "max": np.full(d, box[k][1]),
                          "mean": np.full(d, sum(box[k]) / 2), "std": np.full(d, (box[k][1] - box[k][0]) / 4)}
                      for k, d in dims.items()})
    first = policy.net.down[0].res1
    with torch.no_grad():
        first.block1[0].weight.zero_()
        first.skip.weight.zero_()
        for cnn in policy.encoder.cnns.values():
            cnn.out.weight.mul_(10.0)
            cnn.out.bias.mul_(10.0)
    return policy


def _observation(front: int, wrist: int) -> dict[str, np.ndarray]:
    """What the node observes from the streams below, with uniform camera images of these grey levels."""
    values = {"joint_pos": panda.HOME_Q, "joint_vel": np.zeros(7), "gripper_width": [FINGERS.sum()],
              "tcp_pos": TCP_POS, "tcp_quat": TCP_QUAT}
    obs = {k: np.asarray(v, np.float32)[None] for k, v in values.items()}
    obs.update({f"image_{c}": np.full((1, 64, 64, 3), level, np.uint8) for c, level in zip(CAMERAS, (front, wrist))})
    return obs


def _distance(action: np.ndarray, chunk: np.ndarray) -> float:
    return float(np.linalg.norm(chunk - np.asarray(action)[None], axis=-1).min())


def test_pixel_policy_with_aux_head_round_trips(tmp_path: Path) -> None:
    policy = _pixel_policy()
    loaded = Policy.load(policy.save(tmp_path / "policy"))
    assert isinstance(loaded, FlowPolicy) and loaded.spec == policy.spec
    assert loaded.spec.aux_dims == {"object_pos": 3} and loaded.aux_head is not None
    rng = np.random.default_rng(0)
    obs = _observation(0, 0)
    obs.update({f"image_{c}": rng.integers(0, 256, (1, 64, 64, 3), dtype=np.uint8) for c in CAMERAS})
    for seed in (1, 2):
        before = policy.predict_chunk(obs, generator=torch.Generator().manual_seed(seed))
        after = loaded.predict_chunk(obs, generator=torch.Generator().manual_seed(seed))
        np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(policy.predict_aux(obs)["object_pos"], loaded.predict_aux(obs)["object_pos"])
    assert before.shape == (16, 7) and np.all(np.isfinite(before))


@pytest.mark.slow
def test_policy_node_runs_pixel_policy_from_two_image_streams(tmp_path: Path) -> None:
    ckpt = _pixel_policy().save(tmp_path / "policy")
    policy = Policy.load(ckpt)
    scenes = {level: policy.predict_chunk(_observation(level, level)) for level in (0, 255)}
    mixed = [policy.predict_chunk(_observation(a, 255 - a)) for a in (0, 255)]
    sep = min(_distance(a, c) for a in scenes[0] for c in (scenes[255], *mixed))
    assert sep > 1e-3, sep  # the scenes' actions are told apart (computed where the node computes: the CPU)
    tol = sep / 4

    path = write_node_launch_file(tmp_path / "policy.launch.yaml", "policy_node",
                                  {"policy_path": str(ckpt), "rate_hz": RATE_HZ, "device": "cpu"})
    targets: list[tuple[float, PoseStamped]] = []
    actions: list[tuple[float, np.ndarray]] = []
    grippers: list[float] = []
    with launch(load_launch_file(path), tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("pixel_feed")
        try:
            node.create_subscription(PoseStamped, "/target_pose", lambda m: targets.append((time.monotonic(), m)), 50)
            node.create_subscription(Float64MultiArray, "/policy/action",
                                     lambda m: actions.append((time.monotonic(), np.asarray(m.data))), 50)
            node.create_subscription(Float64, "/target_gripper", lambda m: grippers.append(m.data), 50)
            js = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
            tcp = node.create_publisher(PoseStamped, "/current_pose", qos_profile_sensor_data)
            cams = [node.create_publisher(Image, f"/{c}/image_raw", qos_profile_sensor_data) for c in CAMERAS]
            names, q = [*panda.JOINT_NAMES, *panda.GRIPPER_JOINTS], np.r_[panda.HOME_Q, FINGERS]
            level = 0

            def feed() -> None:
                now = time.time_ns()
                js.publish(joint_state_to_msg(names, q, np.zeros(9), np.zeros(9), now))
                tcp.publish(pose_to_msg(TCP_POS, TCP_QUAT, now, "base"))
                for cam, pub in zip(CAMERAS, cams):
                    pub.publish(image_to_msg(np.full((64, 64, 3), level, np.uint8), now, cam))

            def spin(seconds: float, until=None) -> bool:  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until, tick=feed, tick_period=1 / 30)

            assert spin(60, until=lambda: len(actions) > 3 or not graph.is_running("policy")), graph.log("policy")
            assert len(actions) > 3, graph.log("policy")
            spin(1.0)  # the first chunks (allocations) left out
            n_targets, n_actions, t0 = len(targets), len(actions), time.monotonic()
            spin(3.0)
            seconds = time.monotonic() - t0
            rate, fresh = (len(targets) - n_targets) / seconds, (len(actions) - n_actions) / seconds
            assert 8.0 <= rate <= 12.0, (rate, fresh)  # 10 Hz with 2 cameras, chunks predicted off the timer thread
            assert fresh >= 6.0, (rate, fresh)  # new actions, not only the last target held while inference is late
            gaps = np.diff([t for t, _ in targets[n_targets:]])
            assert gaps.max() < 0.35, gaps.max()

            for _, msg in targets[n_targets:]:  # within the action limits: one step of the integrator, in the box
                position, quat = pose_from_msg(msg)
                assert np.all(np.isfinite(position)) and np.all(np.isfinite(quat))
                assert np.all(position >= WORKSPACE_LOW - 1e-6) and np.all(position <= WORKSPACE_HIGH + 1e-6)
                assert np.all(np.abs(position - TCP_POS) <= MAX_LIN_SPEED / RATE_HZ + 1e-6)
            assert grippers and all(0.0 <= g <= 1.0 for g in grippers)
            black = [a for _, a in actions[n_actions:]]
            assert all(_distance(a, scenes[0]) <= tol for a in black), graph.log("policy")  # computed from black

            level = 255  # both cameras now show a white scene: the actions must follow
            t_switch = time.monotonic()
            assert spin(5.0, until=lambda: any(t > t_switch and _distance(a, scenes[255]) <= tol for t, a in actions))
            n = len(actions)
            spin(1.0)
            white = [a for _, a in actions[n:]]
            assert len(white) >= 6 and all(_distance(a, scenes[255]) <= tol for a in white)
            assert graph.is_running("policy")
        finally:
            node.destroy_node()
            rclpy.shutdown()
