"""G1 envs: the balance reference controller under pushes, the walk env's reward, checker."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robot_rl.sim  # noqa: F401
from robot_rl.core import SpecError
from robot_rl.sim.experts import BalanceExpert


def _falls(env: gym.Env, policy: BalanceExpert | None, seeds: range, push: tuple[float, float]) -> tuple[int, int]:
    falls = pushes = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed, options={"push_force": push})
        terminated = truncated = False
        while not (terminated or truncated):
            action = policy.act(obs) if policy is not None else np.zeros(29, np.float32)
            obs, _, terminated, truncated, _ = env.step(action)
        falls += terminated
        pushes += env.unwrapped.pushes
    return falls, pushes


@pytest.mark.slow
def test_balance_under_pushes_50_seeds() -> None:
    """>= 94 % of 3 s episodes with 1-2 random 20-60 N x 0.1 s torso pushes end standing."""
    env = gym.make("robot_rl/HumanoidStand-v0")
    falls, pushes = _falls(env, BalanceExpert(), range(50), (20.0, 60.0))
    assert pushes >= 50
    assert falls <= 3, f"{falls}/50 falls"


def test_without_balance_control_pushes_topple_more() -> None:
    """The reference controller matters: holding the posture alone falls more often (same seeds)."""
    env = gym.make("robot_rl/HumanoidStand-v0")
    zero_falls, _ = _falls(env, None, range(100, 112), (20.0, 60.0))
    expert_falls, _ = _falls(env, BalanceExpert(), range(100, 112), (20.0, 60.0))
    assert zero_falls >= 2
    assert expert_falls < zero_falls


def test_fall_terminates() -> None:
    env = gym.make("robot_rl/HumanoidStand-v0", max_episode_steps=400)
    env.reset(seed=0, options={"push_force": (0.0, 0.0)})
    terminated = False
    for _ in range(400):  # fully flexed hips and knees: the robot collapses
        _, _, terminated, truncated, info = env.step(np.r_[np.full(12, -1.0), np.zeros(17)].astype(np.float32))
        if terminated or truncated:
            break
    assert terminated and not info["is_success"]


def test_walk_reward_tracks_command() -> None:
    env = gym.make("robot_rl/HumanoidWalk-v0")
    obs, _ = env.reset(seed=0, options={"command": (0.0, 0.0, 0.0)})
    np.testing.assert_allclose(obs["command"], 0.0)
    expert = BalanceExpert()
    for _ in range(120):
        obs, reward, _, _, info = env.step(expert.act(obs))
    assert info["reward_terms"]["lin_vel_tracking"] > 0.9  # standing still tracks a zero command
    assert info["is_success"]
    assert reward == pytest.approx(sum(info["reward_terms"].values()))
    obs, _ = env.reset(seed=0, options={"command": (0.6, 0.0, 0.0)})
    for _ in range(120):
        obs, _, _, _, info = env.step(expert.act(obs))
    assert info["reward_terms"]["lin_vel_tracking"] < 0.5  # standing still does not track 0.6 m/s
    assert not info["is_success"]
    with pytest.raises(SpecError, match="command"):
        env.reset(seed=0, options={"command": (float("nan"), 0.0, 0.0)})


@pytest.mark.parametrize("env_id", ["robot_rl/HumanoidStand-v0", "robot_rl/HumanoidWalk-v0"])
def test_check_env_humanoid(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.unwrapped.embodiment.name == "g1"
