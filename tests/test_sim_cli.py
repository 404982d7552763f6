"""``robot-rl sim``: list the ids, roll out an expert, reject bad input with exit code 2."""

from __future__ import annotations

import pytest

from robot_rl.cli.main import main


def test_sim_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "list"]) == 0
    out = capsys.readouterr().out.split()
    assert "robot_rl/ArmPickLift-v0" in out and "robot_rl/QuadTrack-RealStandIn-v0" in out


def test_sim_rollout_reports_success(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "rollout", "--env", "robot_rl/ArmReach-v0", "--episodes", "2", "--override",
                 "max_episode_steps=30"]) == 0
    assert "success 2/2 (100 %)" in capsys.readouterr().out


def test_sim_rollout_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "rollout", "--env", "robot_rl/Nope-v0"]) == 2
    assert main(["sim", "rollout", "--override", "policy_hz"]) == 2
    assert main(["sim", "rollout", "--override", "physics_hz=5"]) == 2
    assert "error" in capsys.readouterr().out
