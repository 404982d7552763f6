"""Acceptance of the main job: a reduced ``robot-rl demo`` really improves the policy and needs the human less.

Demonstrations -> behaviour cloning -> evaluation -> online fine-tuning (learner and actor processes,
simulated human) -> evaluation on the same unseen seeds -> DSRL on the fine-tuned policy -> evaluation again. Stated
margins: the success rate without a human rises by at least 15 points, and the share of steps the human
controls falls from the first 25 online episodes to the last 25. The DSRL stage runs 100 episodes with a paced
learner (``--rl-episodes``; its warm-up plus ~80 updates, the same work on a loaded machine): it must keep pace,
publish noise actors the actor swaps in, and the last evaluation must run the frozen policy steered by the newest
one on the same seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_rl.cli.main import main
from robot_rl.learners.online import read_jsonl

MARGIN = 0.15
"""Success rate points the fine-tuned policy must gain over the behaviour-cloned one."""
RL_EPISODES, RL_UTD = 100, 0.05
"""The DSRL stage's budget: actor episodes, and SAC updates per step after its warm-up."""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~5 min alone; under pytest-xdist it shares the cores
def test_reduced_demo_improves_success_and_interventions_fade(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # 600 behaviour-cloning steps and 75 online episodes (1000 and 100 until session 33): two runs at once, as
    # under pytest-xdist, 0 % -> 90 % and 0 % -> 70 % success, the human's share 0.26 -> 0.16 and 0.26 -> 0.17
    # from the first to the last 25 episodes; 365 s each beside the other. The DSRL stage had 45 s of wall clock
    # and published no noise actor in 2 of 4 parallel suite runs (nice 19 beside other tests); 100 paced episodes
    # at 0.05 updates per step took 49 s alone and 110 s beside another run and a busy loop, v5 both times.
    code = main(["demo", "--out", str(tmp_path), "--episodes", "20", "--bc-steps", "600",
                 "--eval-episodes", "20", "--online-episodes", "75", "--story", "nominal",
                 "--rl-episodes", str(RL_EPISODES), "--rl-set", f"learner.update_to_data={RL_UTD}"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "behaviour cloning ->" in printed and "takeovers/episode" in printed

    before = json.loads((tmp_path / "eval_before" / "eval.json").read_text())
    after = json.loads((tmp_path / "eval_after" / "eval.json").read_text())
    assert before["seeds"] == after["seeds"]  # the same unseen episodes
    assert after["success_rate"] >= before["success_rate"] + MARGIN, (before["success_rate"], after["success_rate"])

    episodes = read_jsonl(tmp_path / "online" / "actor_0.jsonl")
    assert len(episodes) == 75
    share = np.array([e["intervention_steps"] / e["steps"] for e in episodes])
    assert share[-25:].mean() < share[:25].mean(), (share[:25].mean(), share[-25:].mean())
    assert episodes[-1]["version_end"] > episodes[0]["version_start"]  # weights were swapped in while acting
    assert any(e["version_end"] > e["version_start"] for e in episodes)  # ... including mid-episode
    assert (tmp_path / "learning_curve.png").stat().st_size > 10_000
    final = json.loads((tmp_path / "online" / "checkpoint" / "state" / "train_state.json").read_text())
    assert final["steps"] == sum(e["steps"] for e in episodes)  # every step reached the learner
    assert final["human_steps"] == sum(e["intervention_steps"] for e in episodes)

    rl = read_jsonl(tmp_path / "rl" / "actor_0.jsonl")
    assert len(rl) == RL_EPISODES and rl[-1]["version_end"] >= 1  # noise actors reached the actor
    cfg = yaml.safe_load((tmp_path / "rl" / "online.yaml").read_text())["learner"]
    assert cfg["max_update_lag"] == cfg["publish_every"] and cfg["update_to_data"] == RL_UTD  # paced
    learner = read_jsonl(tmp_path / "rl" / "learner_log.jsonl")[-1]
    owed = RL_UTD * (learner["steps"] - cfg["dsrl"]["warmup_steps"]) - learner["updates"]
    # paced: the actors wait whenever the learner owes more than max_update_lag, so a starved learner cannot fall
    # behind (its last status can trail the last episodes by a lag's worth: 15-27 seen). Beside one busy loop an
    # unpaced run was 18 behind too; the bound guards the runs where the learner gets the smaller share.
    assert owed <= 2 * cfg["max_update_lag"] and learner["version"] >= 2, learner
    assert rl[0]["version_start"] == 0  # warm-up: the frozen policy alone
    third = json.loads((tmp_path / "eval_rl" / "eval.json").read_text())
    assert third["seeds"] == after["seeds"]
    assert "dsrl: " in printed and "+ dsrl" in printed
