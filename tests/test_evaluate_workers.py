"""``evaluate(..., workers=N)``: the episodes spread over processes give the report one process gives.

Each episode is seeded on its own (env reset and the policy's sampling noise), so the merged report of two
processes equals the sequential one field by field (times aside). A small flow policy whose chunks depend on
the seeded noise, saved and rebuilt in the worker from its folder; ``robot-rl eval --workers 2`` the same;
a worker that fails raises in the caller.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import gymnasium as gym
import pytest
import torch

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.cli.main import main
from robot_rl.policies.base import Policy
from robot_rl.sim.experts import expert_for
from robot_rl.training.eval_workers import EvalRecipe, policy_from_folder
from robot_rl.training.evaluate import EvalReport, evaluate

ENV_ID = "robot_rl/ArmPickLift-v0"
KEYS = ["joint_pos", "gripper_width", "tcp_pos", "object_pos", "goal_pos"]
SAME = ["seeds", "successes", "returns", "lengths", "failures", "metrics"]
"""Every per-episode field of an EvalReport (``seconds`` and ``policy_ms_per_step`` are times)."""


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.tiny_policy import train_tiny_policy

    folder = tmp_path_factory.mktemp("policy") / "policy"
    train_tiny_policy(ENV_ID, expert_for(gym.make(ENV_ID)), KEYS, steps=60, updates=10).save(folder)
    return folder


def fields_of(report: EvalReport) -> dict[str, list]:
    return {name: getattr(report, name) for name in SAME}


def episode_steps(result: object) -> float:
    return float(len(result.transitions))  # type: ignore[attr-defined]


@pytest.mark.slow
def test_two_processes_give_the_sequential_report(policy_dir: Path) -> None:
    torch.set_num_threads(1)
    recipe = EvalRecipe(ENV_ID, partial(policy_from_folder, str(policy_dir)), threads=1)
    reports = {}
    for workers in (1, 2):
        env = gym.make(ENV_ID)
        reports[workers] = evaluate(Policy.load(policy_dir), env, ENV_ID, episodes=5, seed=40, max_steps=30,
                                    metric=episode_steps, workers=workers, recipe=recipe)
        env.close()
    assert reports[1].seeds == list(range(40, 45)) and reports[1].lengths == [30] * 5
    assert fields_of(reports[2]) == fields_of(reports[1])
    assert len(set(reports[1].returns)) == 5  # the episodes differ: the comparison is not trivially equal
    assert reports[2].policy_ms_per_step > 0


@pytest.mark.slow
def test_eval_cli_with_two_workers_writes_the_sequential_report(policy_dir: Path, tmp_path: Path) -> None:
    saved = {}
    for workers in ("1", "2"):
        assert main(["eval", str(policy_dir), "--episodes", "3", "--seed", "7", "--no-progress", "--workers", workers,
                     "--override", "max_episode_steps=20", "--out", str(tmp_path / workers)]) == 0
        saved[workers] = json.loads((tmp_path / workers / "eval.json").read_text())
    assert saved["1"]["seeds"] == [7, 8, 9]
    assert {k: saved["2"][k] for k in SAME} == {k: saved["1"][k] for k in SAME}


def broken_agent(env: object) -> object:
    raise RuntimeError("no such agent")


@pytest.mark.slow
def test_a_failing_worker_raises_in_the_caller() -> None:
    env = gym.make(ENV_ID)
    recipe = EvalRecipe(ENV_ID, broken_agent)
    with pytest.raises(RuntimeError, match="no such agent"):
        evaluate(expert_for(env), env, ENV_ID, episodes=4, seed=0, max_steps=5, workers=2, recipe=recipe)
    with pytest.raises(ValueError, match="recipe"):
        evaluate(expert_for(env), env, ENV_ID, episodes=2, workers=2)
    env.close()
