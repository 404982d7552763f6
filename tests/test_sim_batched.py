"""mujoco.batch-backed QuadHover: same physics as the per-env QuadHover, expert hovers all drones."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.core import SpecError
from robot_rl.robots import cf2x
from robot_rl.sim.batched_quad import BatchedQuadHover
from robot_rl.sim.experts import HoverExpert
from robot_rl.sim.vector import make_vector_env


def test_batched_matches_single_env() -> None:
    venv = BatchedQuadHover(3)
    venv.reset(seed=0)
    single = gym.make("robot_rl/QuadHover-v0")
    single.reset(seed=0)
    base = single.unwrapped
    # the same start for drone 1 and the single env
    base.data.qpos[:] = venv.qpos[1]
    base.data.qvel[:] = venv.qvel[1]
    mujoco.mj_forward(base.model, base.data)
    rng = np.random.default_rng(0)
    for _ in range(10):
        actions = np.c_[rng.uniform(0.4, 0.7, 3), rng.uniform(-0.2, 0.2, (3, 3))].astype(np.float32)
        obs, rewards, *_ = venv.step(actions)
        s_obs, s_reward, *_ = single.step(actions[1])
    np.testing.assert_allclose(obs["position"][1], s_obs["position"], atol=1e-6)
    np.testing.assert_allclose(obs["quat"][1], s_obs["quat"], atol=1e-6)
    assert rewards[1] == pytest.approx(s_reward, abs=1e-5)


def test_expert_hovers_every_drone_and_autoreset() -> None:
    venv = BatchedQuadHover(16, max_episode_steps=120)
    obs, _ = venv.reset(seed=5)
    expert = HoverExpert()
    for _ in range(120):
        actions = np.stack([expert.act({k: v[i] for k, v in obs.items()}) for i in range(16)])
        obs, _, terminated, truncated, info = venv.step(actions)
    assert not terminated.any() and truncated.all()
    assert info["is_success"].all()
    obs, rewards, terminated, truncated, _ = venv.step(actions)  # next-step autoreset
    assert np.all(rewards == 0) and not (terminated.any() or truncated.any())
    assert np.linalg.norm(obs["position"] - obs["goal_pos"], axis=1).max() > 0.05  # fresh random starts


def test_batched_bad_input_and_crash() -> None:
    venv = make_vector_env("robot_rl/QuadHover-v0", 2, batched=True)
    assert isinstance(venv, BatchedQuadHover)
    with pytest.raises(ValueError, match="only"):
        make_vector_env("robot_rl/ArmReach-v0", 2, batched=True)
    venv.reset(seed=0)
    with pytest.raises(SpecError, match="NaN"):
        venv.step(np.full((2, 4), np.nan, np.float32))
    with pytest.raises(SpecError, match="shape"):
        venv.step(np.zeros((3, 4), np.float32))
    crashed = np.zeros(2, bool)
    for _ in range(100):  # motors off: both drones fall and crash (then autoreset)
        obs, _, terminated, truncated, _ = venv.step(np.zeros((2, 4), np.float32))
        crashed |= terminated
        assert not truncated.any()
        if terminated.any():
            assert obs["position"][terminated, 2].max() < 0.1 + 1e-6  # below MIN_HEIGHT when it ended
    assert crashed.all()


def test_next_step_autoreset_ignores_the_action_and_returns_the_reset_state() -> None:
    """Gymnasium's NEXT_STEP mode: the step after an episode's end only resets that drone (nothing is flown)."""
    venv = BatchedQuadHover(4, max_episode_steps=3)
    venv.reset(seed=1)
    actions = np.tile(np.array([0.6, 0.5, -0.5, 0.5], np.float32), (4, 1))
    for _ in range(3):
        obs, _, terminated, truncated, _ = venv.step(actions)
    assert truncated.all()
    obs, rewards, terminated, truncated, _ = venv.step(actions)
    np.testing.assert_array_equal(obs["angvel"], 0.0)  # a flown 20 ms step would spin up the body rates
    np.testing.assert_allclose(obs["last_action"][:, 0], cf2x.HOVER_THRUST / cf2x.THRUST_MAX, rtol=1e-6)
    assert np.all(rewards == 0) and not (terminated.any() or truncated.any())
    obs, *_ = venv.step(actions)  # the new episode flies
    assert np.abs(obs["angvel"]).max() > 0.1
