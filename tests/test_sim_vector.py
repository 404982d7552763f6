"""Vectorised envs reproduce single envs; batched open-loop rollouts equal a plain mj_step loop."""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.utils.env_checker import check_env

from robot_rl.robots import cf2x
from robot_rl.sim.vector import batch_rollout, full_state, make_vector_env


def test_sync_vector_env_matches_single_envs() -> None:
    venv = make_vector_env("robot_rl/QuadHover-v0", 3)
    obs, _ = venv.reset(seed=10)
    assert obs["position"].shape == (3, 3)
    actions = np.tile(np.array([0.3, 0.0, 0.1, 0.0], np.float32), (3, 1))
    for _ in range(3):
        obs, rewards, _, _, info = venv.step(actions)
    for i in range(3):
        env = gym.make("robot_rl/QuadHover-v0")
        single, _ = env.reset(seed=10 + i)
        for _ in range(3):
            single, reward, *_ = env.step(actions[i])
        np.testing.assert_allclose(obs["position"][i], single["position"], rtol=1e-6)
        assert rewards[i] == reward
    assert "reward_terms" in info
    venv.close()


def test_async_vector_env_runs() -> None:
    venv = make_vector_env("robot_rl/ArmReach-v0", 2, asynchronous=True)
    obs, _ = venv.reset(seed=0)
    obs, *_ = venv.step(np.zeros((2, 7), np.float32))
    assert obs["tcp_pos"].shape == (2, 3) and not np.allclose(obs["tcp_pos"][0], obs["tcp_pos"][1])
    venv.close()


def test_batch_rollout_equals_mj_step_loop_and_uses_per_model_dynamics() -> None:
    m = cf2x.load_model()
    d = mujoco.MjData(m)
    d.qpos[2] = 1.0
    mujoco.mj_forward(m, d)
    s0 = full_state(m, d)
    rng = np.random.default_rng(0)
    controls = np.concatenate([rng.uniform(0.05, 0.08, (2, 50, 4)), np.zeros((2, 50, 4))], axis=2)
    heavy = cf2x.load_model()
    heavy.body_mass[heavy.body(cf2x.BODY).id] *= 1.5
    states = batch_rollout([m, heavy], s0, controls)
    assert states.shape == (2, 50, s0.size)
    for step in range(50):  # reference: the same controls through mj_step
        d.ctrl[:] = controls[0, step]
        mujoco.mj_step(m, d)
    np.testing.assert_allclose(states[0, -1], full_state(m, d), rtol=1e-9, atol=1e-12)
    assert not np.allclose(states[0, -1], states[1, -1])  # the heavier model fell differently


def test_check_env_every_registered_id() -> None:
    from robot_rl.sim import ENV_IDS

    assert len(ENV_IDS) == 16
    for env_id in ENV_IDS:
        env = gym.make(env_id).unwrapped
        obs, _ = env.reset()  # unseeded, as check_env's first reset: name the key that leaves the space
        outside = {k: v for k, v in obs.items() if v not in env.observation_space[k]}
        assert not outside, f"{env_id}: reset() observation outside its space: {outside}"
        check_env(env, skip_render_check=True)
    check_env(gym.make("robot_rl/QuadHover-v0", render_mode="rgb_array").unwrapped)  # with the render check
