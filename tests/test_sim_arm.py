"""Panda tabletop envs: scripted experts' success rates, env checker, bad input, determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robot_rl.sim  # noqa: F401  (registers the ids)
from robot_rl.core import SpecError
from robot_rl.sim.experts import expert_for


def _success_rate(env_id: str, episodes: int, seed0: int = 1000) -> float:
    env = gym.make(env_id)
    expert = expert_for(env)
    wins = 0
    for ep in range(episodes):
        obs, info = env.reset(seed=seed0 + ep)
        expert.reset()
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            done = terminated or truncated or info["is_success"]
        wins += bool(info["is_success"])
    env.close()
    return wins / episodes


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "required"), [
    ("robot_rl/ArmReach-v0", 0.98),
    ("robot_rl/ArmPush-v0", 0.9),
    ("robot_rl/ArmPickLift-v0", 0.95),
])
def test_expert_success_rate(env_id: str, required: float) -> None:
    rate = _success_rate(env_id, 50)
    assert rate >= required, f"{env_id}: expert success {rate:.2f} < {required}"


def test_random_actions_rarely_lift() -> None:
    """The success check is not trivially true: random actions do not lift the cube."""
    env = gym.make("robot_rl/ArmPickLift-v0", max_episode_steps=20)
    rng = np.random.default_rng(0)
    wins = 0
    for ep in range(3):
        env.reset(seed=ep)
        for _ in range(20):
            _, _, _, truncated, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
            wins += info["is_success"]
            if truncated:
                break
    assert wins == 0


def test_expert_takes_over_mid_episode() -> None:
    """After 15 random steps the expert still solves pick-and-lift (simulated human intervention)."""
    env = gym.make("robot_rl/ArmPickLift-v0", max_episode_steps=100)
    expert = expert_for(env)
    rng = np.random.default_rng(1)
    wins = 0
    for ep in range(5):
        obs, _ = env.reset(seed=ep)
        expert.reset()
        for _ in range(15):
            obs, *_ = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        for _ in range(85):
            obs, _, _, truncated, info = env.step(expert.act(obs))
            if info["is_success"] or truncated:
                break
        wins += info["is_success"]
    assert wins >= 4


@pytest.mark.parametrize("env_id", ["robot_rl/ArmReach-v0", "robot_rl/ArmPickLift-v0"])
def test_check_env(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.embodiment.name == "panda"


def test_joint_position_mode_tracks_targets() -> None:
    env = gym.make("robot_rl/ArmReach-v0", control_mode="joint_position")
    obs, _ = env.reset(seed=0)
    target = obs["joint_pos"].astype(np.float64) + np.array([0.3, -0.2, 0.2, 0.3, -0.3, 0.2, 0.4])
    for _ in range(15):
        obs, *_ = env.step(np.r_[target, 1.0].astype(np.float32))
    assert np.max(np.abs(obs["joint_pos"] - target)) < 0.02


def test_cartesian_pose_mode_tracks_absolute_tool_targets() -> None:
    """The mode a real arm's log is replayed in: the tcp reaches an absolute target; a target outside the
    workspace box is clipped into it; a quaternion far from unit length keeps the orientation target."""
    env = gym.make("robot_rl/ArmReach-v0", control_mode="cartesian_pose")
    obs, _ = env.reset(seed=0)
    target = np.r_[obs["tcp_pos"] + np.array([0.06, -0.04, -0.05]), obs["tcp_quat"], 1.0].astype(np.float32)
    for _ in range(20):
        obs, *_ = env.step(target)
    assert np.linalg.norm(obs["tcp_pos"] - target[:3]) < 0.005
    assert abs(abs(float(obs["tcp_quat"] @ target[3:7])) - 1.0) < 1e-3
    far = np.r_[2.0, 0.0, obs["tcp_pos"][2], 0.0, 0.0, 0.0, 0.0, 1.0].astype(np.float32)  # x beyond the box
    for _ in range(30):
        obs, *_ = env.step(far)
    assert 0.7 < obs["tcp_pos"][0] <= 0.8 + 0.005  # clipped to the box's x_max (0.8 m)
    assert abs(abs(float(obs["tcp_quat"] @ target[3:7])) - 1.0) < 1e-2  # zero quaternion: orientation held
    env.close()


def test_bad_actions_rejected_or_clipped() -> None:
    env = gym.make("robot_rl/ArmPickLift-v0")
    obs, _ = env.reset(seed=3)
    qpos = env.unwrapped.data.qpos.copy()
    for bad in (np.full(7, np.nan, np.float32), np.r_[np.zeros(6), np.inf].astype(np.float32)):
        with pytest.raises(SpecError, match="NaN or inf"):
            env.step(bad)
    with pytest.raises(SpecError, match="shape"):
        env.step(np.zeros(3, np.float32))
    np.testing.assert_array_equal(env.unwrapped.data.qpos, qpos)  # nothing was simulated
    _, _, _, _, info = env.step(np.full(7, 50.0, np.float32))
    assert info["action_clipped"]
    tcp_before = obs["tcp_pos"]
    obs, _, _, _, info = env.step(np.zeros(7, np.float32))
    assert not info["action_clipped"]
    # a clipped +50 command moved the tcp at most one full-scale step (4 cm) plus tracking lag
    assert np.linalg.norm(obs["tcp_pos"] - tcp_before) < 0.12


def test_divergence_truncates_with_reason() -> None:
    env = gym.make("robot_rl/ArmReach-v0")
    env.reset(seed=0)
    base = env.unwrapped
    base.data.qvel[:] = 1e12  # blow the state up as a diverging integrator would
    obs, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert truncated and not terminated and reward == 0.0
    assert "diverged" in info["truncation_reason"] or "non-finite" in info["truncation_reason"]
    assert all(np.all(np.isfinite(v)) for v in obs.values())
    with pytest.raises(gym.error.ResetNeeded, match="diverged"):
        env.step(np.zeros(7, np.float32))  # fail safe: no stepping on from a blown-up state
    obs, _ = env.reset(seed=1)
    _, _, _, truncated, _ = env.step(np.zeros(7, np.float32))
    assert not truncated


def test_reward_terms_sum_to_reward() -> None:
    env = gym.make("robot_rl/ArmPush-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(7, np.float32))
    assert set(info["reward_terms"]) == {"reach", "push", "success"}
    assert reward == pytest.approx(sum(info["reward_terms"].values()))
    sparse = gym.make("robot_rl/ArmPush-v0", sparse_reward=True)
    sparse.reset(seed=0)
    _, reward, _, _, _ = sparse.step(np.zeros(7, np.float32))
    assert reward == 0.0


def test_pick_lift_with_cartesian_impedance_controller() -> None:
    """The same expert solves pick-and-lift through robot_rl.control's Cartesian impedance controller."""
    env = gym.make("robot_rl/ArmPickLift-v0", controller="cartesian_impedance")
    expert = expert_for(env)
    wins = 0
    for ep in range(8):
        obs, _ = env.reset(seed=500 + ep)
        expert.reset()
        for _ in range(80):
            obs, _, _, truncated, info = env.step(expert.act(obs))
            if info["is_success"] or truncated:
                break
        wins += info["is_success"]
    assert wins >= 7


def test_unknown_controller_rejected() -> None:
    with pytest.raises(Exception, match="controller"):
        gym.make("robot_rl/ArmReach-v0", controller="magic")
    with pytest.raises(SpecError, match="needs a Cartesian control_mode"):
        gym.make("robot_rl/ArmReach-v0", controller="cartesian_impedance", control_mode="joint_position")


def test_rates_are_configurable() -> None:
    """1000 Hz physics with a 20 Hz policy: 50 controller ticks per step, and the expert still reaches."""
    env = gym.make("robot_rl/ArmReach-v0", physics_hz=1000, policy_hz=20, max_episode_steps=80)
    expert = expert_for(env)
    base = env.unwrapped
    assert base.physics_steps == 50 and base.model.opt.timestep == pytest.approx(0.001)
    wins = 0
    for ep in range(3):
        obs, _ = env.reset(seed=ep)
        t0 = base.data.time
        obs, *_ = env.step(expert.act(obs))
        assert base.data.time - t0 == pytest.approx(0.05)
        for _ in range(79):
            obs, _, _, truncated, info = env.step(expert.act(obs))
            if info["is_success"] or truncated:
                break
        wins += info["is_success"]
    assert wins == 3
