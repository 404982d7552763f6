"""RL from scratch: configs load strictly, bad ones stop with a message naming the key, statistics are right."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.core.config import ConfigError, load_config
from robot_rl.rl.config import RLConfig
from robot_rl.rl.envs import env_spec
from robot_rl.rl.normalization import RunningNorm

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "config" / "rl").glob("*.yaml")))
def test_shipped_configs_load_and_fit_their_env(name: str) -> None:
    cfg = load_config(RLConfig, REPO / "config" / "rl" / f"{name}.yaml")
    spec = env_spec(cfg)
    assert spec.obs_dim > 0 and spec.action_dim > 0
    assert np.all(spec.high > spec.low)
    if cfg.obs_keys is not None:
        assert list(spec.keys) == cfg.obs_keys


def test_quad_spec_flattens_in_the_configured_order() -> None:
    cfg = load_config(RLConfig, REPO / "config" / "rl" / "quad_hover.yaml")
    spec = env_spec(cfg)
    assert spec.keys == ("position", "quat", "linvel", "angvel") and spec.dims == (3, 4, 3, 3)
    assert spec.robot == "cf2x" and spec.control_mode == "thrust_body_rates"
    obs = {k: np.full((2, d), i, np.float32) for i, (k, d) in enumerate(zip(spec.keys, spec.dims))}
    obs["goal_pos"] = np.full((2, 3), 9, np.float32)
    flat = spec.flatten(obs)
    assert flat.shape == (2, 13) and list(flat[0]) == [0] * 3 + [1] * 4 + [2] * 3 + [3] * 3
    a = np.array([[-1, -1, 0, 1], [2, 0, 0, 0]], np.float32)
    np.testing.assert_allclose(spec.to_env(a), [[0, -1, 0, 1], [1, 0, 0, 0]], atol=1e-6)  # clipped, scaled
    np.testing.assert_allclose(spec.to_normalised(spec.to_env(a[:1])), a[:1], atol=1e-6)


@pytest.mark.parametrize(("overrides", "message"), [
    (["env_id=robot_rl/NoSuchTask-v0"], "env_id: cannot make 'robot_rl/NoSuchTask-v0'"),
    (["obs_keys=[position, velocity]"], "obs_keys: ['velocity'] not in"),
    (["initial_action=[0.5, 0.0]"], "initial_action: robot_rl/QuadHover-v0 takes 4 action values"),
    (["env_id=robot_rl/ArmReach-v0", "vector=batched", "obs_keys=null", "initial_action=null"],
     "vector / env_options: cannot build"),
])
def test_bad_env_settings_stop_with_the_key_named(tmp_path: Path, overrides: list[str], message: str) -> None:
    from robot_rl.rl.train import train_rl

    cfg = load_config(RLConfig, REPO / "config" / "rl" / "quad_hover.yaml", [*overrides, "total_steps=1000"])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        train_rl(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "policy").exists()


@pytest.mark.parametrize(("overrides", "message"), [
    (["algorithm=dqn"], "algorithm: expected one of"),
    (["ppo.gamma=1.5"], "gamma must be in"),
    (["num_envs=0"], "num_envs: must be >= 1"),
    (["time_budget_s=-1"], "time_budget_s: must be > 0"),
    (["ppo.learning_rate=.nan"], "learning_rate: must be a positive number"),
    (["sac.buffer_size=10"], "buffer_size 10 is smaller than batch_size"),
    (["no_such_key=1"], "unknown key"),
    (["device=tpu"], "device: must be one of"),
    (["error_keys=null", "target_error=0.02"], "target_error: needs error_keys"),
    (["ppo.anneal_lr=true"], "anneal_lr: needs schedule: fixed"),
])
def test_bad_values_are_config_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(RLConfig, REPO / "config" / "rl" / "quad_hover.yaml", overrides)


class ImageOnly(gym.Env):  # type: ignore[type-arg]
    observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class Unbounded(gym.Env):  # type: ignore[type-arg]
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


@pytest.mark.parametrize(("entry", "message"), [(ImageOnly, "the MLP policy takes float vectors only"),
                                                (Unbounded, "action bounds must be finite")])
def test_spaces_the_policy_cannot_take_are_refused(entry: type, message: str) -> None:
    env_id = f"test_rl/{entry.__name__}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry)
    with pytest.raises(ConfigError, match=message):
        env_spec(RLConfig(env_id=env_id))


def test_running_norm_matches_the_statistics_of_all_batches() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (n, 4)) for n in (1, 7, 64, 300)]
    batches.append(np.full((5, 4), 3.0))
    norm = RunningNorm(4, clip=5.0)
    for b in batches:
        norm.update(b)
    every = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean, every.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var, every.var(0), rtol=1e-10)
    z = norm.normalize(every)
    assert np.abs(z).max() <= 5.0 and abs(float(z.mean())) < 0.05
    const = RunningNorm(1)
    const.update(np.ones((10, 1)))
    assert float(const.std[0]) == pytest.approx(0.01)  # floored: a constant feature is not blown up by 1e4


def test_targets_need_every_set_criterion() -> None:
    from robot_rl.rl.curves import eval_row
    from robot_rl.rl.train import budget_spent, meets_target
    from robot_rl.training.evaluate import EvalReport

    report = EvalReport("robot_rl/QuadHover-v0", successes=[True] * 4, failures=[False] * 4, returns=[0.0] * 4,
                        lengths=[10] * 4, extra={"success_at_last_step": [1.0] * 4,
                                                 "final_error": [0.01, 0.01, 0.01, 0.03]})
    hover = load_config(RLConfig, REPO / "config" / "rl" / "quad_hover.yaml")
    assert meets_target(hover, eval_row(report, 0, 0.0))  # target_success 1.0
    assert not meets_target(load_config(RLConfig, REPO / "config" / "rl" / "quad_hover.yaml",
                                        ["target_error=0.02"]), eval_row(report, 0, 0.0))  # one ends 3 cm off
    report.extra["success_at_last_step"][0] = 0.0  # passed the goal, did not hold it at the end
    row = eval_row(report, 0, 0.0)
    assert row["success_rate"] == 1.0 and row["success_at_last_step"] == 0.75
    assert not meets_target(hover, row)  # the target reads success at the last step
    report.failures[0] = True
    assert eval_row(report, 0, 0.0)["crash_rate"] == 0.25  # ended by the task without success at the end
    assert not meets_target(RLConfig(), row)  # no target: never
    assert budget_spent(hover, 1_500_000, 12.0) == pytest.approx(0.5)  # 3M steps or 60 s, the larger share
    assert budget_spent(hover, 300_000, 30.0) == pytest.approx(0.5)
