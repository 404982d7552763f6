"""Residual RL on the scripted experts of the quadrotor tracking and humanoid walking tasks: a short residual
run shrinks the stand-in quadrotor's tracking error; the shipped configs load and pin what they promise."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.residual_training import train_residual

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config
from robot_rl.core.spaces import SpecError
from robot_rl.learners.algorithms.residual import (
    ResidualAgent,
    ResidualConfig,
    TaskReward,
)
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.episode import run_episode
from robot_rl.sim.experts import expert_for

ROOT = Path(__file__).resolve().parents[1]
TRACK = "robot_rl/QuadTrack-RealStandIn-v0"
STEPS = 200
QUAD_STATE = ["position", "quat", "linvel", "angvel", "goal_pos", "goal_vel", "last_action"]
"""The residual's inputs, as in config/learners/online_quad_track_residual.yaml."""
"""Episode length of the test (4 s of the figure-eight; the benchmark flies 8 s)."""


def tracking_error(agent: ResidualAgent, seeds: tuple[int, ...] = (0, 1, 2)) -> float:
    """Mean |p - goal| after the first second, averaged over ``seeds`` (none may crash)."""
    errors = []
    for seed in seeds:
        out = run_episode(gym.make(TRACK, max_episode_steps=STEPS), agent, 0, seed=seed, keep=True)
        assert out.length == STEPS, "the quadrotor crashed during the evaluation"
        d = [np.linalg.norm(t.next_observation["position"] - t.next_observation["goal_pos"]) for t in out.transitions]
        errors.append(float(np.mean(d[50:])))
    return float(np.mean(errors))


@pytest.mark.slow
def test_a_short_residual_run_reduces_the_stand_in_tracking_error(tmp_path: Path) -> None:
    """The tracking expert sags and lags ~15 cm behind the figure-eight under the stand-in's hidden mass and
    motor changes; a small residual trained in-process (learner object + episode loop, fixed seeds) removes
    a clear part of it. Training is not monotone, so the seeds and the length are fixed."""
    torch.set_num_threads(1)
    cfg = load_config(ResidualConfig, {"base": "expert", "scale": 0.15, "warmup_steps": 400, "reward": "env",
                                       "state_keys": QUAD_STATE,
                                       "sac": {"hidden": 64, "num_critics": 2, "batch_size": 128, "utd_ratio": 2,
                                               "actor_delay": 300, "residual_penalty": 0.0}})
    env = TaskReward(gym.make(TRACK, max_episode_steps=STEPS), cfg.reward)
    before = tracking_error(ResidualAgent(expert_for(env)))
    algo, trained, seconds = train_residual(cfg, env, tmp_path, EPISODES)
    after = tracking_error(ResidualAgent(expert_for(env), residual=trained, deterministic=True))
    print(f"tracking error: expert {before * 100:.1f} cm -> expert + residual {after * 100:.1f} cm "
          f"({EPISODES} episodes, {algo.updates} updates, {seconds:.0f} s)")
    assert before > 0.10
    assert after < 0.88 * before


EPISODES = 40
"""Training episodes of the tracking test (the first 2 are the warm-up). With the Crazyflie's motor lag
(0.145 s) measured 15.4 -> 12.0 cm, ~35 s of one CPU core for 6600 updates (60 episodes: 12.1 cm; 20 episodes
with a residual penalty of 0.1: 23.1 cm, worse than the expert). Before the lag was modelled the same test
reached 9.0 cm in 20 episodes: a lagging drone is harder to correct step by step."""


@pytest.mark.parametrize("name", ["online_quad_track_residual", "online_humanoid_residual"])
def test_the_shipped_residual_configs_load_with_an_expert_base(name: str) -> None:
    cfg = load_config(OnlineConfig, ROOT / "config" / "learners" / f"{name}.yaml")
    assert cfg.learner.algorithm == "residual" and cfg.learner.residual.base == "expert" and not cfg.policy
    assert cfg.learner.residual.reward == "env"
    # a correction within scale never reaches the simulated human's risk (normalised L2 to the expert)
    assert cfg.learner.residual.scale < cfg.actor.human.risk_threshold
    assert cfg.actor.seed + cfg.actor.episodes <= 1000  # benchmarks/residual_experts.py evaluates on 1000+


def test_the_walk_config_pins_the_command_and_a_reset_option_still_overrides_it() -> None:
    cfg = load_config(OnlineConfig, ROOT / "config" / "learners" / "online_humanoid_residual.yaml")
    env = gym.make(cfg.actor.env_id, **cfg.actor.env_options)
    for seed in (0, 1):  # the actors reset without options: every episode walks the pinned command
        obs, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(obs["command"], np.array([0.6, 0.0, 0.0], np.float32))
    obs, _ = env.reset(seed=2, options={"command": (0.1, 0.0, 0.2)})
    np.testing.assert_allclose(obs["command"], [0.1, 0.0, 0.2], atol=1e-6)
    obs, _ = gym.make("robot_rl/HumanoidWalk-v0").reset(seed=0)
    assert not np.allclose(obs["command"], [0.6, 0.0, 0.0])  # without the option it is sampled
    with pytest.raises(SpecError):
        gym.make("robot_rl/HumanoidWalk-v0", command=(0.6, 0.0))
