"""Seeds, domain randomisation, real-world stand-ins, latency/motor lag, configs and cameras."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import ConfigError
from robot_rl.robots import cf2x
from robot_rl.sim.config import Randomization, SimConfig
from robot_rl.sim.experts import expert_for

DR = {"mass_scale": (0.8, 1.2), "friction_scale": (0.7, 1.3), "damping_scale": (0.5, 2.0),
      "actuator_gain_scale": (0.9, 1.1), "latency_s": (0.0, 0.006), "motor_time_constant_s": (0.0, 0.01),
      "action_latency_s": (0.0, 0.01),
      "action_noise_std": 0.002, "observation_noise_std": 0.001}


def _rollout(env_id: str, seed: int, steps: int, **kwargs: object) -> tuple[np.ndarray, np.ndarray]:
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    states, rewards = [], []
    for _ in range(steps):
        action = rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32)
        obs, reward, terminated, truncated, _ = env.step(action)
        states.append(np.concatenate([v.ravel() for v in obs.values()]))
        rewards.append(reward)
        if terminated or truncated:
            break
    env.close()
    return np.array(states), np.array(rewards)


@pytest.mark.parametrize("env_id", ["robot_rl/ArmPickLift-v0", "robot_rl/HumanoidStand-v0", "robot_rl/QuadHover-v0"])
def test_fixed_seed_identical_rollouts_with_randomization(env_id: str) -> None:
    a = _rollout(env_id, 7, 8, randomization=DR)
    b = _rollout(env_id, 7, 8, randomization=DR)
    c = _rollout(env_id, 8, 8, randomization=DR)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].shape != c[0].shape or not np.array_equal(a[0], c[0])


def test_randomization_changes_model_and_resets_from_nominal() -> None:
    env = gym.make("robot_rl/ArmPickLift-v0", randomization=DR)
    base = env.unwrapped
    nominal = base.randomizer.body_mass.copy()
    scales = set()
    for seed in range(4):
        _, info = env.reset(seed=seed)
        scale = info["dynamics"]["mass_scale"]
        scales.add(round(scale, 6))
        np.testing.assert_allclose(base.model.body_mass, nominal * scale)  # never compounds
        assert 0.8 <= scale <= 1.2
    assert len(scales) == 4
    assert base.pipeline.delay_steps in (0, 1, 2, 3)


def test_stand_in_is_hidden_and_different() -> None:
    """Same seed and policy: the stand-in flies differently and the observation does not reveal why."""
    errors = {}
    for variant in ("robot_rl/QuadHover-v0", "robot_rl/QuadHover-RealStandIn-v0"):
        env = gym.make(variant, max_episode_steps=100)
        expert = expert_for(env)
        obs, _ = env.reset(seed=3)
        assert set(obs) == {"position", "quat", "linvel", "angvel", "goal_pos", "goal_vel", "goal_error",
                            "vel_error", "last_action"}
        for _ in range(100):
            obs, *_ = env.step(expert.act(obs))
        errors[variant] = float(np.linalg.norm(obs["position"] - obs["goal_pos"]))
    # nominal hover is mm-accurate; the heavier, weaker stand-in sags by centimetres (the sim-to-real gap)
    assert errors["robot_rl/QuadHover-v0"] < 0.01
    assert errors["robot_rl/QuadHover-RealStandIn-v0"] > 0.03


def test_every_robot_has_a_stand_in() -> None:
    for env_id in ("robot_rl/ArmPickLift-RealStandIn-v0", "robot_rl/HumanoidStand-RealStandIn-v0"):
        env = gym.make(env_id)
        _, info = env.reset(seed=0)
        base = env.unwrapped
        assert "dynamics" not in info  # hidden
        assert not np.allclose(base.model.body_mass, base.randomizer.body_mass)
        assert base.action_delay_steps > 0
        expert = expert_for(env)  # the stand-ins are harder, not impossible: the nominal expert still copes
        obs, _ = env.reset(seed=1)
        expert.reset()
        for _ in range(150):
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            if terminated or truncated or (info["is_success"] and "Arm" in env_id):
                break
        assert info["is_success"]


def _vz_change(commands: np.ndarray, tau: float, dt: float = 0.002) -> float:
    """Vertical speed gained by a level Crazyflie whose 4 motors start at hover thrust and lag ``commands``
    (one per-rotor thrust [N] per physics step) with the pipeline's backward-Euler first-order lag."""
    alpha = dt / (tau + dt)
    thrust, dv = cf2x.HOVER_THRUST, 0.0
    for command in commands:
        thrust += alpha * (command - thrust)
        dv += dt * cf2x.GRAVITY * (thrust / cf2x.HOVER_THRUST - 1.0)
    return dv


def _quad_vz(action: float, **randomization: tuple[float, float]) -> float:
    env = gym.make("robot_rl/QuadHover-v0", control_mode="motor_commands", randomization=randomization)
    env.reset(seed=0)
    base = env.unwrapped
    base.data.qvel[:] = 0
    base.data.qpos[3:7] = [1, 0, 0, 0]
    obs, *_ = env.step(np.full(4, action, np.float32))
    return float(obs["linvel"][2])


def test_latency_delays_the_response() -> None:
    """Zero thrust under a 20 ms (one policy step) delay: the first step still flies on the old command."""
    tau, hover = cf2x.MOTOR_TIME_CONSTANT, cf2x.HOVER_THRUST
    cut = _vz_change(np.zeros(10), tau)
    assert _quad_vz(0.0) == pytest.approx(cut, rel=0.02)
    assert abs(_quad_vz(0.0, latency_s=(0.02, 0.02))) < 0.05 * abs(cut)
    # a 10 ms action delay: half of the 20 ms step still flies on the previous (hover) command
    half = _vz_change(np.r_[np.full(5, hover), np.zeros(5)], tau)
    assert _quad_vz(0.0, action_latency_s=(0.01, 0.01)) == pytest.approx(half, rel=0.03)
    assert abs(half) < 0.5 * abs(cut)


def test_motor_lag_slows_the_response() -> None:
    """A randomised motor time constant adds to the Crazyflie's nominal one."""
    full = np.full(10, cf2x.THRUST_MAX)
    fast, slow = _quad_vz(1.0), _quad_vz(1.0, motor_time_constant_s=(0.05, 0.05))
    assert fast == pytest.approx(_vz_change(full, cf2x.MOTOR_TIME_CONSTANT), rel=0.02)
    assert slow == pytest.approx(_vz_change(full, cf2x.MOTOR_TIME_CONSTANT + 0.05), rel=0.02)
    assert 0 < slow < 0.9 * fast


def test_config_from_yaml_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text("policy_hz: 20\nmax_episode_steps: 7\nrandomization:\n  mass_scale: [0.9, 1.1]\n")
    env = gym.make("robot_rl/ArmReach-v0", config=str(path))
    cfg: SimConfig = env.unwrapped.config
    assert cfg.policy_hz == 20 and cfg.substeps == 25 and cfg.randomization.mass_scale == (0.9, 1.1)
    env.reset(seed=0)
    truncations = []
    for _ in range(7):
        *_, truncated, info = env.step(np.zeros(7, np.float32))
        truncations.append(truncated)
    assert truncations == [False] * 6 + [True] and info["truncation_reason"] == "time_limit"
    with pytest.raises(ConfigError, match="physics_hz"):
        SimConfig(physics_hz=100)
    with pytest.raises(ConfigError, match="integer"):
        SimConfig(physics_hz=500, policy_hz=30)
    with pytest.raises(ConfigError, match="mass_scale"):
        Randomization(mass_scale=(1.2, 0.8))
    with pytest.raises(ConfigError, match="mass_scle"):
        gym.make("robot_rl/ArmReach-v0", randomization={"mass_scle": (1, 1)})


def test_camera_observation_and_render() -> None:
    env = gym.make("robot_rl/ArmPickLift-v0", cameras=("front", "wrist"), image_size=(48, 64), render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    for key in ("image_front", "image_wrist"):
        assert obs[key].shape == (48, 64, 3) and obs[key].dtype == np.uint8
        assert obs[key].std() > 5  # a real picture, not a blank frame
        assert env.observation_space[key].contains(obs[key])
    before = obs["image_front"].copy()
    for _ in range(5):
        obs, *_ = env.step(np.r_[0, 0, -1, 0, 0, 0, 1].astype(np.float32))
    assert np.abs(obs["image_front"].astype(int) - before).mean() > 0.1  # the arm moved in the picture
    frame = env.render()
    assert frame is not None and frame.shape == (240, 320, 3)
    with pytest.raises(Exception, match="camera"):
        gym.make("robot_rl/ArmReach-v0", cameras=("nope",))


def test_episode_length_follows_gymnasium() -> None:
    """The registered length is the default; ``gym.make(id, max_episode_steps=N)`` changes it, longer too."""
    from robot_rl.runtime.episode import run_episode

    assert gym.make("robot_rl/QuadHover-v0").spec.max_episode_steps == 250
    assert gym.spec("robot_rl/HumanoidWalk-RealStandIn-v0").max_episode_steps == 500

    def length(**kwargs: object) -> tuple[int, str]:
        env = gym.make("robot_rl/ArmReach-v0", **kwargs)
        result = run_episode(env, lambda obs: np.zeros(env.action_space.shape, np.float32), 0, seed=3)
        return result.length, result.truncation_reason

    assert length() == (40, "time_limit")
    assert length(max_episode_steps=55) == (55, "time_limit")  # beyond the registered 40
    assert length(max_episode_steps=12) == (12, "time_limit")
