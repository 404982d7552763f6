"""Crazyflie envs: hover/track reference controller success, free fall, motor commands, checker."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robot_rl.sim  # noqa: F401
from robot_rl.robots import cf2x
from robot_rl.sim.experts import expert_for


def _fly(env: gym.Env, seed: int) -> tuple[bool, bool, float]:
    """(crashed, success at the end, mean goal distance over the last 3/4 of the episode)."""
    expert = expert_for(env)
    obs, _ = env.reset(seed=seed)
    errors, info, terminated = [], {}, False
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        errors.append(float(np.linalg.norm(obs["position"] - obs["goal_pos"])))
        done = terminated or truncated
    return terminated, bool(info["is_success"]), float(np.mean(errors[len(errors) // 4:]))


@pytest.mark.slow
def test_hover_expert_50_seeds() -> None:
    env = gym.make("robot_rl/QuadHover-v0", max_episode_steps=150)
    results = [_fly(env, 2000 + s) for s in range(50)]
    crashes = sum(r[0] for r in results)
    success = np.mean([r[1] for r in results])
    assert crashes == 0
    assert success >= 0.98, f"hover success {success:.2f}"


@pytest.mark.slow
def test_track_expert_follows_figure_eight() -> None:
    env = gym.make("robot_rl/QuadTrack-v0", max_episode_steps=300)
    results = [_fly(env, 3000 + s) for s in range(10)]
    assert sum(r[0] for r in results) == 0
    mean_error = np.mean([r[2] for r in results])
    assert mean_error < 0.08, f"tracking error {mean_error:.3f} m"


def test_motors_lag_with_the_crazyflie_time_constant_then_the_drone_falls_and_crashes() -> None:
    """Cut to zero, the rotors spin down as a first-order lag (cf2x.MOTOR_TIME_CONSTANT), not at once."""
    env = gym.make("robot_rl/QuadHover-v0", control_mode="motor_commands")
    env.reset(seed=0)
    base = env.unwrapped
    base.data.qpos[cf2x.QPOS_BASE_QUAT] = [1, 0, 0, 0]
    base.data.qvel[:] = 0
    dt, n = base.model.opt.timestep, base.physics_steps
    alpha = dt / (cf2x.MOTOR_TIME_CONSTANT + dt)
    obs, *_ = env.step(np.zeros(4, np.float32))  # 20 ms: the motors keep most of their hover thrust
    left = (1 - alpha) ** np.arange(1, n + 1)
    expected_dv = dt * cf2x.GRAVITY * np.sum(left - 1)
    assert obs["linvel"][2] == pytest.approx(expected_dv, rel=0.02)
    assert abs(expected_dv) < 0.15 * 9.81 * 0.02  # an instant motor would fall at g
    steps_per_tau = round(cf2x.MOTOR_TIME_CONSTANT / (n * dt))
    for _ in range(steps_per_tau - 1):
        env.step(np.zeros(4, np.float32))
    thrust = base.data.ctrl[base.actuators[:4]]
    np.testing.assert_allclose(thrust / cf2x.HOVER_THRUST, np.exp(-steps_per_tau * n * dt / cf2x.MOTOR_TIME_CONSTANT),
                               atol=0.03)
    terminated = False
    for _ in range(100):
        _, _, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
        if terminated or truncated:
            break
    assert terminated


def test_hover_thrust_balances_gravity() -> None:
    """Motor commands at the hover fraction keep a level drone nearly still for 0.4 s."""
    env = gym.make("robot_rl/QuadHover-v0", control_mode="motor_commands")
    env.reset(seed=0)
    base = env.unwrapped
    base.data.qpos[cf2x.QPOS_BASE_QUAT] = [1, 0, 0, 0]
    base.data.qvel[:] = 0
    start = base.data.qpos[cf2x.QPOS_BASE_POS].copy()
    frac = cf2x.HOVER_THRUST / cf2x.THRUST_MAX
    for _ in range(20):
        env.step(np.full(4, frac, np.float32))
    assert np.linalg.norm(base.data.qpos[cf2x.QPOS_BASE_POS] - start) < 0.01


def test_check_env_quad() -> None:
    check_env(gym.make("robot_rl/QuadTrack-v0").unwrapped, skip_render_check=True)


def test_the_observation_carries_the_applied_previous_action() -> None:
    """``last_action`` starts at the hover action and then reports what was applied (clipped), in both modes."""
    for mode, hover in (("thrust_body_rates", [cf2x.HOVER_THRUST / cf2x.THRUST_MAX, 0, 0, 0]),
                        ("motor_commands", [cf2x.HOVER_THRUST / cf2x.THRUST_MAX] * 4)):
        env = gym.make("robot_rl/QuadHover-v0", control_mode=mode)
        obs, _ = env.reset(seed=0)
        np.testing.assert_allclose(obs["last_action"], hover, atol=1e-6)
        action = np.array([0.7, 1.5, -0.3, -2.0], np.float32)
        obs, *_ = env.step(action)
        np.testing.assert_allclose(obs["last_action"], np.clip(action, env.action_space.low, env.action_space.high))
