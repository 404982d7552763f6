"""Action adapters: the node's action -> target rule is the env's, and relabel inverts it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.control.base import TargetRejected
from robot_rl.control.rotations import quat_to_mat
from robot_rl.control.targets import BodyRateTarget, JointTarget, PoseTarget
from robot_rl.core import ControlMode, SpecError
from robot_rl.policies.base import PolicySpec
from robot_rl.robots import cf2x, g1
from robot_rl.runtime.actions import MAX_BODY_RATE, control_mode, joint_position_map, make_adapter


def test_cartesian_delta_round_trip_gives_the_action_back() -> None:
    adapter = make_adapter("cartesian_delta", "panda", 10.0)
    rng = np.random.default_rng(0)
    before = {"tcp_pos": np.array([0.5, 0.0, 0.3]), "tcp_quat": np.array([0.0, 1.0, 0.0, 0.0])}
    for _ in range(20):
        action = rng.uniform(-1, 1, 7)
        command = adapter.to_target(action, before)
        assert isinstance(command.target, PoseTarget)
        after = {"tcp_pos": command.target.position, "tcp_quat": command.target.quat}
        back = adapter.relabel(before, after, command.gripper)
        np.testing.assert_allclose(back, action, atol=1e-5)
        before = after  # the orientation target accumulates along the stream, as in the env


def test_cartesian_pose_refuses_a_degenerate_quaternion() -> None:
    adapter = make_adapter("absolute_pose", "panda", 10.0)  # the old name still works
    assert adapter.mode == ControlMode.CARTESIAN_POSE
    command = adapter.to_target(np.array([0.5, 0, 0.3, 1, 0, 0, 0, 0.25]), {})
    assert command.gripper == 0.25
    with pytest.raises(TargetRejected):
        adapter.to_target(np.array([0.5, 0, 0.3, 0, 0, 0, 0, 1]), {})


def test_humanoid_joint_targets_match_the_env() -> None:
    env = gym.make("robot_rl/HumanoidStand-v0")
    env.reset(seed=0)
    adapter = make_adapter("joint_position", "g1", 50.0)
    rng = np.random.default_rng(1)
    low, high = np.array(g1.EMBODIMENT.limits.position_lower), np.array(g1.EMBODIMENT.limits.position_upper)
    for _ in range(5):
        action = rng.uniform(-1.2, 1.2, 29).astype(np.float32)  # beyond the box: both clip the same way
        env.step(action)
        target = adapter.to_target(action, {}).target
        assert isinstance(target, JointTarget)
        np.testing.assert_allclose(target.q, env.unwrapped.q_target)
        expected = np.clip(g1.CROUCH_Q + 0.5 * np.clip(action, -1, 1), low, high)  # the documented rule
        np.testing.assert_allclose(target.q, expected, atol=1e-6)
    env.close()
    inside = rng.uniform(-0.3, 0.3, 29)
    back = adapter.relabel({}, {"joint_pos": joint_position_map("g1").to_q(inside)}, 1.0)
    np.testing.assert_allclose(back, inside, atol=1e-6)


def test_arm_joint_position_is_absolute_with_a_gripper() -> None:
    adapter = make_adapter("joint_position", "panda", 10.0)
    assert adapter.action_dim == 8
    q = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.7])
    command = adapter.to_target(np.r_[q, -1.0], {})
    np.testing.assert_allclose(command.target.q, q)
    assert command.gripper == 0.0
    np.testing.assert_allclose(adapter.relabel({}, {"joint_pos": q}, 1.0), np.r_[q, 1.0], atol=1e-6)


def test_quadrotor_thrust_and_rates_match_the_env() -> None:
    env = gym.make("robot_rl/QuadHover-v0")
    env.reset(seed=0)
    adapter = make_adapter("thrust_body_rates", "cf2x", 50.0)
    rng = np.random.default_rng(2)
    for _ in range(5):
        action = rng.uniform([0, -1, -1, -1], [1, 1, 1, 1]).astype(np.float32)
        env.step(action)
        target = adapter.to_target(action, {}).target
        assert isinstance(target, BodyRateTarget)
        assert target.thrust == pytest.approx(env.unwrapped.collective)
        np.testing.assert_allclose(target.rates, env.unwrapped.rates_cmd)
        assert target.thrust == pytest.approx(action[0] * 4 * cf2x.THRUST_MAX, rel=1e-6)
    env.close()
    # relabel: level, unaccelerated flight needs the hover thrust; rates are what was measured
    level = {"quat": np.array([1.0, 0, 0, 0]), "linvel": np.array([0.3, 0, 0]), "angvel": np.array([0.4, 0, -0.8])}
    back = adapter.relabel(level, level, 1.0)
    assert back[0] == pytest.approx(cf2x.HOVER_THRUST / cf2x.THRUST_MAX)
    np.testing.assert_allclose(back[1:], level["angvel"] / MAX_BODY_RATE, atol=1e-7)
    # tilted 90 deg about x: gravity is no longer along the body z axis, so no thrust explains the motion
    tilted = dict(level, quat=np.array([np.cos(np.pi / 4), np.sin(np.pi / 4), 0, 0]))
    assert quat_to_mat(tilted["quat"])[2, 2] == pytest.approx(0.0, abs=1e-9)
    assert adapter.relabel(level, tilted, 1.0)[0] == pytest.approx(0.0, abs=1e-6)


def test_modes_a_robot_lacks_are_refused() -> None:
    with pytest.raises(SpecError, match="not an arm"):
        make_adapter("cartesian_delta", "g1", 50.0)
    with pytest.raises(SpecError, match="cf2x offers"):
        make_adapter("joint_position", "cf2x", 50.0)
    with pytest.raises(SpecError, match="is not one of"):
        control_mode("teleport")


def test_policy_spec_keeps_robot_and_control_mode_and_reads_older_files() -> None:
    spec = PolicySpec({"s": 2}, {}, 4, robot="cf2x", control_mode="thrust_body_rates")
    assert PolicySpec.from_json(spec.to_json()) == spec
    old = {"state_dims": {"s": 2}, "image_shapes": {}, "action_dim": 4}
    assert PolicySpec(**{**old}).to_json() == old  # unknown fields are not written: older files stay identical
    assert PolicySpec.from_json(old).control_mode == ""
    with pytest.raises(SpecError, match="control_mode"):
        PolicySpec({"s": 2}, {}, 4, control_mode="teleport")
