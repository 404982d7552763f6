"""DAgger recording: the learner's policy drives, the store keeps the expert's action at every state it reached."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_action_noise import Spy
from test_data_record import ENV_ID, ReachExpert

from robot_rl.cli.main import main
from robot_rl.core.config import load_config
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.policy_driven import PolicyDriven
from robot_rl.data.recorder import record
from robot_rl.policies.base import PolicySpec
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.runtime.policy_runner import PolicyRunner


def away_policy() -> FlowPolicy:
    """An untrained flow policy on the point's state whose actions are squashed near [0.9, 1]: it always moves
    up and right, never toward the target, so where it drives and what the expert labels differ."""
    torch.manual_seed(0)
    policy = FlowPolicy(load_config(FlowConfig, {"horizon": 4, "n_obs_steps": 1, "unet_channels": [8, 16],
                                                 "num_inference_steps": 2, "executor": {"n_action_steps": 2}}),
                        PolicySpec({"qpos": 2, "target": 2}, {}, 2))
    policy.set_stats({"qpos": {"min": -2 * np.ones(2), "max": 2 * np.ones(2)},
                      "target": {"min": -2 * np.ones(2), "max": 2 * np.ones(2)},
                      "action": {"min": 0.9 * np.ones(2), "max": np.ones(2)}})
    return policy.eval()


def _record(env: gym.Env, path: Path, episodes: int = 2) -> EpisodeStore:
    store = EpisodeStore.create(path, DatasetInfo(robot="point", fps=20.0))
    record(env, ReachExpert(env), store, episodes=episodes, seed=3, max_steps=30, progress=False)
    return store


def test_the_policy_drives_and_the_store_keeps_the_experts_labels(tmp_path: Path) -> None:
    spy = Spy(gym.make(ENV_ID))
    driven = PolicyDriven(spy, PolicyRunner(away_policy()))
    store = _record(driven, tmp_path / "dagger.zarr")
    steps = [t for i in range(store.num_episodes) for t in store.transitions(i)]
    stored, executed = np.stack([t.action for t in steps]), np.stack(spy.executed)
    expert = ReachExpert(None)  # type: ignore[arg-type]
    np.testing.assert_allclose(stored, np.stack([expert.act(t.observation) for t in steps]), atol=1e-5)
    assert np.all(executed > 0.75) and driven.policy_steps == len(steps)  # the policy's actions ran ...
    assert np.mean(np.all(stored > 0.75, axis=1)) < 0.5  # ... not the expert's
    t = steps[0]  # the state follows the executed action, not the stored one
    np.testing.assert_allclose(t.next_observation["qpos"], t.observation["qpos"] + 0.05 * 2.0 * executed[0],
                               atol=1e-5)
    assert store.episode_info(0).success is False  # it drove away from the target


def test_beta_one_is_the_expert_and_seeded_runs_replay(tmp_path: Path) -> None:
    expert_only = _record(gym.make(ENV_ID), tmp_path / "clean.zarr")
    beta_one = _record(PolicyDriven(gym.make(ENV_ID), PolicyRunner(away_policy()), beta=1.0), tmp_path / "b1.zarr")
    np.testing.assert_array_equal(beta_one.array("observation.qpos")[:], expert_only.array("observation.qpos")[:])
    half = [_record(PolicyDriven(gym.make(ENV_ID), PolicyRunner(away_policy()), beta=0.5), tmp_path / f"h{i}.zarr")
            for i in range(2)]
    np.testing.assert_array_equal(half[0].array("observation.qpos")[:], half[1].array("observation.qpos")[:])
    with pytest.raises(ValueError, match="beta"):
        PolicyDriven(gym.make(ENV_ID), PolicyRunner(away_policy()), beta=1.5)
    with pytest.raises(RuntimeError, match="before reset"):
        PolicyDriven(gym.make(ENV_ID), PolicyRunner(away_policy())).step(np.zeros(2, np.float32))


def test_cli_records_with_a_driver_and_refuses_a_bad_checkpoint(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    policy_dir = tmp_path / "policy"
    away_policy().save(policy_dir)
    args = ["data", "record", "--env", ENV_ID, "--expert", "test_data_record:ReachExpert", "--episodes", "1",
            "--max-steps", "20", "--no-progress"]
    out = tmp_path / "cli.zarr"
    assert main([*args, "--out", str(out), "--driver", str(policy_dir)]) == 0
    store = EpisodeStore.open(out)
    assert f"dagger:{policy_dir}" in store.info.source
    assert np.all(np.diff(store.array("observation.qpos")[:, 0]) > 0)  # up and right: the policy drove
    capsys.readouterr()
    (policy_dir / "model.safetensors").write_bytes(b"not a checkpoint")
    bad = tmp_path / "bad.zarr"
    assert main([*args, "--out", str(bad), "--driver", str(policy_dir)]) == 2
    assert "--driver" in capsys.readouterr().out and not bad.exists()
