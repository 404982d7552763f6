"""The G1 walking recipe's parts: deployable observations, a privileged critic, legs-only actions, the gait
reward, pushes, and envs split over processes giving the same episodes."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

import robot_rl.sim  # noqa: F401
from robot_rl.core import SpecError
from robot_rl.core.config import ConfigError, load_config
from robot_rl.policies.base import Policy
from robot_rl.rl.config import RLConfig
from robot_rl.rl.envs import env_spec
from robot_rl.rl.normalization import RunningNorm
from robot_rl.rl.train import export_policy, make_agent, shape_rewards, warm_start
from robot_rl.robots import g1
from robot_rl.sim.envs.humanoid_gait import GAIT_PERIOD_S, gait_clock, leg_phases
from robot_rl.sim.sharded import ShardedVectorEnv
from robot_rl.sim.threaded import ThreadedVectorEnv

REPO = Path(__file__).resolve().parents[1]
WALK = REPO / "config" / "rl" / "humanoid_walk.yaml"
DEPLOYABLE = {"projected_gravity", "base_angvel", "joint_pos", "joint_vel", "last_action", "command", "gait_clock"}
"""What unitree_bridge gives a real G1's policy (IMU, encoders) plus what the policy node feeds itself."""


def walk(*overrides: str) -> RLConfig:
    return load_config(RLConfig, WALK, ["num_envs=4", "eval_episodes=2", *overrides])


def test_the_shipped_walking_config_reads_only_what_a_real_g1_measures() -> None:
    cfg = walk()
    spec = env_spec(cfg)
    assert set(spec.keys) == DEPLOYABLE
    assert set(spec.critic_keys) == {"base_linvel", "base_height"}  # privileged: the critic only
    assert spec.action_dim == 12 and spec.env_action_dim == 29


def test_legs_only_policy_exports_the_whole_action_with_the_rest_held_and_warm_starts_exactly(tmp_path: Path) -> None:
    cfg = walk()
    spec = env_spec(cfg)
    rng = np.random.default_rng(0)
    norm = RunningNorm(spec.critic_dim, clip=cfg.obs_clip)
    norm.update(rng.normal(0.0, 0.5, (200, spec.critic_dim)))
    agent = make_agent(cfg, spec, norm, torch.device("cpu"))
    with torch.no_grad():
        for p in agent.actor.parameters():  # type: ignore[attr-defined]
            p.add_(torch.randn_like(p) * 0.1)
    export_policy(agent, spec, norm, cfg, version=5).save(tmp_path / "policy")
    policy = Policy.load(tmp_path / "policy")
    assert policy.spec.action_dim == 29 and set(policy.spec.state_dims) == DEPLOYABLE
    raw = rng.normal(0.0, 0.5, (8, spec.critic_dim)).astype(np.float32)
    obs, start = {}, 0
    for key, dim in policy.spec.state_dims.items():
        obs[key] = raw[:, None, start:start + dim]
        start += dim
    action = policy.predict_chunk(obs)[:, 0]
    assert np.all(action[:, 12:] == 0.0)  # waist and arms at the default posture
    x = torch.from_numpy(norm.normalize(raw))
    with torch.no_grad():
        legs = agent.actor(TensorDict({"policy": x[:, :spec.obs_dim]}, batch_size=[8])).clamp(-1, 1)  # type: ignore
    np.testing.assert_allclose(action[:, :12], legs.numpy(), atol=1e-4)
    # the critic reads the privileged keys as well: changing them moves the value, not the action
    moved = raw.copy()
    moved[:, spec.obs_dim:] += 3.0
    with torch.no_grad():
        a2 = agent.actor(TensorDict({"policy": torch.from_numpy(norm.normalize(moved))[:, :spec.obs_dim]},
                                    batch_size=[8]))  # type: ignore[attr-defined]
        v1 = agent.critic(TensorDict({"critic": x}, batch_size=[8]))  # type: ignore[attr-defined]
        v2 = agent.critic(TensorDict({"critic": torch.from_numpy(norm.normalize(moved))}, batch_size=[8]))  # type: ignore
    torch.testing.assert_close(a2.clamp(-1, 1), legs, atol=1e-4, rtol=0)
    assert not torch.allclose(v1, v2)
    fresh_norm = RunningNorm(spec.critic_dim, clip=cfg.obs_clip)
    fresh = make_agent(cfg, spec, fresh_norm, torch.device("cpu"))
    warm_start(fresh, fresh_norm, spec, str(tmp_path / "policy"))
    export_policy(fresh, spec, fresh_norm, cfg, version=6).save(tmp_path / "copy")
    np.testing.assert_allclose(Policy.load(tmp_path / "copy").predict_chunk(obs)[:, 0], action, atol=1e-5)


@pytest.mark.parametrize("override, match", [
    ("critic_obs_keys=[base_linvel,command]", "critic_obs_keys"),  # command is the actor's already
    ("critic_obs_keys=[odometry]", "critic_obs_keys"),
    ("action_dims=[0,29]", "action_dims"),
])
def test_bad_recipe_keys_are_config_errors(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        env_spec(walk(override))


def test_sac_refuses_the_ppo_only_options() -> None:
    with pytest.raises(ConfigError, match="PPO only"):
        walk("algorithm=sac")


def test_gait_clock_and_last_action_are_observed_and_the_gait_reward_pays_for_the_phase() -> None:
    env = gym.make("robot_rl/HumanoidWalk-v0", reward="gait").unwrapped
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs["gait_clock"], [0.0, 1.0])
    np.testing.assert_array_equal(obs["last_action"], np.zeros(29))
    action = np.full(29, 0.05, np.float32)
    action[0] = 2.0  # clipped to 1 by the env, reported as applied
    obs, _, _, _, info = env.step(action)
    np.testing.assert_allclose(obs["gait_clock"], gait_clock(1 / 50), atol=1e-6)
    assert obs["last_action"][0] == 1.0 and obs["last_action"][1] == np.float32(0.05)
    for _ in range(4):  # t = 0.1 s: the left leg in its stance phase, the right one in its swing phase
        obs, _, _, _, info = env.step(np.zeros(29, np.float32))
    phases = leg_phases(5 / 50)
    assert phases[0] < 0.55 <= phases[1]
    # standing, both feet are on the ground: the contact term pays only for the left one
    assert info["reward_terms"]["contact"] == pytest.approx(0.18)
    assert info["reward_terms"]["feet_swing_height"] == 0.0  # only a foot in the air is held to the apex
    assert np.allclose(gait_clock(GAIT_PERIOD_S + 0.1), gait_clock(0.1), atol=1e-6)


def test_pushes_kick_the_pelvis_and_are_seeded() -> None:
    def run(seed: int, speed: float) -> float:
        env = gym.make("robot_rl/HumanoidWalk-v0", push_speed=speed, push_interval_s=(0.1, 0.1)).unwrapped
        env.reset(seed=seed)
        peak = 0.0
        for _ in range(10):
            env.step(np.zeros(29, np.float32))
            peak = max(peak, float(np.linalg.norm(env.data.qvel[g1.QVEL_BASE_LINVEL][:2])))
        return peak

    still = run(0, 0.0)
    assert still < 0.1
    assert run(0, 0.5) > still + 0.1
    assert run(0, 0.5) == run(0, 0.5) and run(0, 0.5) != run(1, 0.5)
    with pytest.raises(SpecError, match="push_speed"):
        gym.make("robot_rl/HumanoidWalk-v0", push_speed=-1.0)


def test_sharded_envs_step_exactly_as_threaded_ones() -> None:
    """Same seeds, same actions: the same observations, rewards, ends and info keys through falls and resets."""
    kw = {"reward": "gait", "physics_hz": 250, "push_speed": 0.3, "randomization": {"mass_scale": [0.9, 1.1]}}
    a = ThreadedVectorEnv("robot_rl/HumanoidWalk-v0", 5, **kw)
    b = ShardedVectorEnv("robot_rl/HumanoidWalk-v0", 5, processes=2, **kw)
    try:
        oa, _ = a.reset(seed=3)
        ob, _ = b.reset(seed=3)
        assert all(np.array_equal(oa[k], ob[k]) for k in oa)
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(120):
            act = rng.uniform(-0.6, 0.6, (5, 29)).astype(np.float32)
            ra, rb = a.step(act), b.step(act)
            assert all(np.array_equal(ra[0][k], rb[0][k]) for k in ra[0])
            for i in (1, 2, 3):
                np.testing.assert_array_equal(ra[i], rb[i])
            np.testing.assert_array_equal(ra[4]["_is_success"], rb[4]["_is_success"])
            ends += int(ra[2].sum())
        assert ends >= 5  # episodes ended and restarted along the way
        with pytest.raises(SpecError, match="NaN"):
            b.step(np.full((5, 29), np.nan, np.float32))
    finally:
        a.close()
        b.close()


def test_only_positive_rewards_clips_each_step_before_the_termination_penalty() -> None:
    reward, terminated = np.array([-2.0, 0.5, -0.1]), np.array([False, False, True])
    clipped = shape_rewards(walk("termination_penalty=1.0", "reward_scale=0.5"), reward, terminated)
    np.testing.assert_allclose(clipped, [0.0, 0.25, -0.5])
    raw = shape_rewards(walk("only_positive_rewards=false", "termination_penalty=1.0", "reward_scale=0.5"), reward,
                        terminated)
    np.testing.assert_allclose(raw, [-1.0, 0.25, -0.55])


def test_gait_reward_weights_can_be_overridden_and_unknown_terms_are_refused() -> None:
    def terms(**kw: object) -> dict[str, float]:
        env = gym.make("robot_rl/HumanoidWalk-v0", reward="gait", **kw)
        env.reset(seed=0)
        return env.step(np.zeros(29, np.float32))[4]["reward_terms"]

    base, heavier = terms(), terms(reward_weights={"alive": 0.5})
    assert base["alive"] == pytest.approx(0.15) and heavier["alive"] == pytest.approx(0.5)
    assert heavier["contact"] == base["contact"]
    with pytest.raises(SpecError, match="unknown terms"):
        gym.make("robot_rl/HumanoidWalk-v0", reward="gait", reward_weights={"alvie": 1.0})
    with pytest.raises(SpecError, match="reward_weights"):
        gym.make("robot_rl/HumanoidWalk-v0", reward="tracking", reward_weights={"alive": 1.0})
