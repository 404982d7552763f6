"""RAPTOR's pretrained foundation policy flies our Crazyflie through the adapter: frames and motor order right."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.robots import cf2x
from robot_rl.sim.experts.raptor import POLICY_HZ, RaptorAgent, raptor_observation

pytest.importorskip("foundation_policy")


def test_the_adapter_builds_raptors_input_in_its_frames() -> None:
    """Goal offset in the world, row-major body->world rotation, world linear and body angular velocity."""
    quat = np.array([np.cos(0.25), 0.0, 0.0, np.sin(0.25)])  # 0.5 rad about z
    obs = {"position": np.array([1.0, 2.0, 3.0]), "goal_pos": np.array([1.0, 2.0, 2.5]), "quat": quat,
           "linvel": np.array([0.1, 0.2, 0.3]), "goal_vel": np.zeros(3), "angvel": np.array([0.0, 0.0, 1.0])}
    x = raptor_observation(obs, np.array([0.1, -0.1, 0.2, -0.2]))
    assert x.shape == (22,)
    np.testing.assert_allclose(x[:3], [0.0, 0.0, 0.5])
    c, s = np.cos(0.5), np.sin(0.5)
    np.testing.assert_allclose(x[3:12], [c, -s, 0, s, c, 0, 0, 0, 1], atol=1e-12)  # rows of R(z, 0.5)
    np.testing.assert_allclose(x[12:18], [0.1, 0.2, 0.3, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(x[18:], [0.1, -0.1, 0.2, -0.2])


def test_raptor_hovers_our_crazyflie() -> None:
    """A wrong frame, motor order or thrust mapping crashes within a second; the right one holds ~2 cm."""
    env = gym.make("robot_rl/QuadHover-v0", control_mode="motor_commands", policy_hz=POLICY_HZ,
                   max_episode_steps=int(4 * POLICY_HZ))
    agent = RaptorAgent()
    errors = []
    for seed in range(5):
        obs, _ = env.reset(seed=100 + seed)
        agent.reset()
        for t in range(int(4 * POLICY_HZ)):
            obs, _, terminated, truncated, _ = env.step(agent.act(obs))
            assert not terminated, f"RAPTOR crashed (seed {100 + seed}, step {t})"
            if truncated:
                break
        errors.append(np.linalg.norm(obs["position"] - obs["goal_pos"]))
    assert max(errors) < 0.05, f"RAPTOR hover errors {np.round(errors, 3)} m"
    assert cf2x.YAW_TORQUE_SIGNS.tolist() == [-1.0, 1.0, -1.0, 1.0]  # RAPTOR's yaw reaction signs
