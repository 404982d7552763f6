"""``robot-rl demo`` (its default story) wires its stages: the stand-in plays the real robot after the simulator
stages; ``--stop-after`` stops where a user likes.

A tiny run (2 demonstrations, 3 episodes per online stage, 2 evaluation episodes) checks the wiring, not
the success rates (benchmarks/README.md, The arm on the "real" robot, has those): each stage starts from the
previous stage's newest weights, the randomised stage runs in the randomised simulator with the
action-gated supervisor, the real stage on the stand-in with the credited own steps, and every
evaluation on the stand-in runs the demo's unseen seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from robot_rl.cli.demo_real import REAL_ENV_ID
from robot_rl.cli.main import main


@pytest.mark.slow
def test_demo_real_runs_every_stage_from_the_previous_ones_weights(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--out", str(tmp_path), "--episodes", "2", "--bc-steps", "20", "--eval-episodes", "2",
                 "--online-episodes", "3", "--randomized-episodes", "3", "--real-episodes", "3",
                 "--eval-workers", "1"])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"on the robot that plays the real one ({REAL_ENV_ID})" in printed
    reports = {name: json.loads((tmp_path / f"eval_{name}" / "eval.json").read_text())
               for name in ("after", "real_start", "real_randomized", "real_final")}
    assert all(r["env_id"] == REAL_ENV_ID for n, r in reports.items() if n != "after")
    assert reports["after"]["env_id"] == "robot_rl/ArmPickLift-v0"
    assert len({tuple(r["seeds"]) for r in reports.values()}) == 1  # the same unseen seeds everywhere
    randomized = yaml.safe_load((tmp_path / "randomized" / "online.yaml").read_text())
    real = yaml.safe_load((tmp_path / "real" / "online.yaml").read_text())
    assert randomized["actor"]["env_options"]["randomization"]["damping_scale"] == [0.7, 2.5]
    assert randomized["actor"]["human_risk"] == "action" and randomized["actor"]["env_id"] == "robot_rl/ArmPickLift-v0"
    assert randomized["policy"].startswith(str(tmp_path / "online" / "weights"))
    assert real["actor"]["env_id"] == REAL_ENV_ID and real["learner"]["hg_dagger"]["success_fraction"] == 0.25
    assert real["policy"].startswith(str(tmp_path / "randomized" / "weights"))
    assert real["learner"]["demos"] == str(tmp_path / "demos.zarr")
    assert real["learner"]["gate"]["enabled"]  # what acts on the robot goes through the deployment gate
    assert not (tmp_path / "rl").exists() and "reinforcement" not in printed  # the nominal story's RL stage
    for folder in ("randomized", "real"):
        assert (tmp_path / f"learning_curve_{folder}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_stop_after_ends_the_story_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--out", str(tmp_path), "--episodes", "2", "--bc-steps", "20", "--eval-episodes", "2",
                 "--eval-workers", "1", "--stop-after", "behaviour cloning"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "== behaviour cloning" in printed and "== evaluation" not in printed
    assert (tmp_path / "bc" / "policy").is_dir() and not (tmp_path / "eval_before").exists()
    with pytest.raises(SystemExit, match="no stage 'reinforcement'"):
        main(["demo", "--out", str(tmp_path), "--stop-after", "reinforcement"])
    with pytest.raises(SystemExit, match="--story nominal"):
        main(["demo", "--out", str(tmp_path), "--pixels"])
