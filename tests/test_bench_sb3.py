"""Smoke test of benchmarks/sb3_sac_pick_lift.py (skipped without the ``bench`` extra)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sb3_sac_pick_lift.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sb3_sac_pick_lift", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(120)
def test_tiny_run_writes_a_curve_with_the_demos_in_the_buffer(bench: ModuleType, tmp_path: Path) -> None:
    record = bench.main(["--demo-episodes", "2", "--env-steps", "300", "--eval-every", "150",
                         "--eval-episodes", "2", "--final-episodes", "2", "--learning-starts", "50",
                         "--batch-size", "64", "--hidden", "64", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "curve.json").read_text())
    assert saved == json.loads(json.dumps(record)) and (tmp_path / "curve.png").stat().st_size > 0
    assert record["demo_episodes"] == 2 and record["demo_success_rate"] == 1.0
    assert record["demo_transitions"] == sum(record["demo_lengths"]) == record["buffer_size_after_demos"] > 0
    steps = [p["env_steps"] for p in record["curve"]]
    assert steps[0] == 0 and steps == sorted(steps) and len(set(steps)) == len(steps) and steps[-1] <= 300
    assert record["final"]["env_steps"] == 300 and record["final"]["updates"] > 0
    for p in [*record["curve"], record["final"]]:
        assert 0.0 <= p["success_rate"] <= 1.0 and p["wall_seconds"] >= 0.0
    assert sum(p["train_episodes"] for p in record["curve"]) <= 300 // 80
    assert all(p["train_success_rate"] is None or 0.0 <= p["train_success_rate"] <= 1.0 for p in record["curve"])


def test_store_demos_get_the_same_sparse_reward_as_recorded_ones(bench: ModuleType, tmp_path: Path) -> None:
    from robot_rl.data.schema import DatasetInfo
    from robot_rl.data.store import EpisodeStore
    from robot_rl.runtime.episode import run_episode
    from robot_rl.sim.experts import expert_for

    recorded, _ = bench.record_demos(bench.ENV_ID, 1, seed=3)
    env = gym.make(bench.ENV_ID)  # a store keeps the env's shaped reward, as robot-rl sim record writes it
    shaped = run_episode(env, expert_for(env), 0, seed=3, keep=True).transitions
    assert any(t.reward != float(t.reward > 0) for t in shaped)
    with EpisodeStore.create(tmp_path / "d.zarr", DatasetInfo(robot="panda")) as store:
        store.add_episode(shaped)
    read, success = bench.store_demos(tmp_path / "d.zarr", bench.ENV_ID)
    assert success == [True] and len(read[0]) == len(recorded[0])
    assert [t.reward for t in read[0]] == [t.reward for t in recorded[0]] and sum(t.reward for t in read[0]) > 0
    keys = bench.state_keys(bench.make_env(bench.ENV_ID).observation_space)
    np.testing.assert_allclose(bench.flatten(read[0][5].observation, keys),
                               bench.flatten(recorded[0][5].observation, keys))
