"""The G1 walking reference controller: it walks HumanoidWalk-v0 at commanded velocities."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.sim.envs.humanoid_walk import HumanoidWalkEnv
from robot_rl.sim.experts import BalanceExpert, WalkingController, WalkParams, expert_for

COMMAND_LOW = np.array([-0.2, -0.15, -0.4])
COMMAND_HIGH = np.array([0.4, 0.15, 0.4])
"""The command range tested (a subset of the env's: faster than 0.4 m/s forward is not reached)."""


def _walk(env: HumanoidWalkEnv, controller: WalkingController | BalanceExpert, command: np.ndarray,
          seed: int, steps: int = 400) -> tuple[bool, bool, np.ndarray]:
    """Success, fall and planar pelvis displacement [m] of one episode."""
    obs, _ = env.reset(seed=seed, options={"command": command})
    controller.reset()
    start = env.data.qpos[:2].copy()
    info: dict = {}
    terminated = False
    for _ in range(steps):
        obs, _, terminated, _, info = env.step(controller.act(obs))
        if terminated:
            break
    return bool(info.get("is_success")), terminated, env.data.qpos[:2] - start


@pytest.mark.slow
def test_walks_at_commanded_velocities_50_seeds() -> None:
    env = gym.make("robot_rl/HumanoidWalk-v0").unwrapped
    assert isinstance(env, HumanoidWalkEnv)
    controller = expert_for(env)
    assert isinstance(controller, WalkingController)
    successes = falls = 0
    for i in range(50):
        command = np.random.default_rng(1000 + i).uniform(COMMAND_LOW, COMMAND_HIGH)
        ok, fell, _ = _walk(env, controller, command, seed=i)
        successes += ok
        falls += fell
    # measured: 30/30 (first 30 seeds) within 0.15 m/s of the command after 8 s, no falls
    assert successes >= 45, successes
    assert falls <= 1, falls


@pytest.mark.slow
def test_goes_where_commanded_and_balance_alone_does_not() -> None:
    env = gym.make("robot_rl/HumanoidWalk-v0").unwrapped
    assert isinstance(env, HumanoidWalkEnv)
    for command in ((0.3, 0.0, 0.0), (-0.15, 0.0, 0.0), (0.0, 0.12, 0.0), (0.0, -0.12, 0.0)):
        c = np.array(command)
        ok, fell, moved = _walk(env, WalkingController(), c, seed=3)
        assert ok and not fell, command
        # 8 s at the command, less the 1 s ramp-up and start: most of v * t, in the commanded direction
        expected = c[:2] * 8.0
        assert np.dot(moved, expected) / np.dot(expected, expected) == pytest.approx(0.85, abs=0.2), (command, moved)
    ok, fell, moved = _walk(env, BalanceExpert(), np.array([0.3, 0.0, 0.0]), seed=3)
    assert not ok and np.linalg.norm(moved) < 0.3  # standing is not walking


def test_steps_in_place_and_turns() -> None:
    env = gym.make("robot_rl/HumanoidWalk-v0").unwrapped
    assert isinstance(env, HumanoidWalkEnv)
    ok, fell, moved = _walk(env, WalkingController(), np.zeros(3), seed=5)
    assert ok and not fell and np.linalg.norm(moved) < 0.5  # drifts a few cm/s (measured 0.34 m in 8 s)
    obs, _ = env.reset(seed=6, options={"command": (0.0, 0.0, 0.4)})
    controller = WalkingController()
    yaw0 = np.arctan2(env.base_rotation()[1, 0], env.base_rotation()[0, 0])
    for _ in range(300):
        obs, _, terminated, _, _ = env.step(controller.act(obs))
        assert not terminated
    yaw = np.arctan2(env.base_rotation()[1, 0], env.base_rotation()[0, 0])
    turned = (yaw - yaw0 + np.pi) % (2 * np.pi) - np.pi
    assert turned == pytest.approx(0.4 * 6.0 * 0.85, abs=0.6)  # 6 s at 0.4 rad/s, less the ramp


def test_params_are_checked() -> None:
    with pytest.raises(ValueError, match="step_time"):
        WalkParams(step_time=2.0)
    with pytest.raises(ValueError, match="width"):
        WalkParams(min_width=0.3, step_width=0.2)
