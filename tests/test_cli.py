"""The robot-rl command line: subcommands listed, doctor reports real versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import pytest
import torch


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "robot_rl.cli.main", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    proc = _cli("--help")  # the entry point itself, in a fresh interpreter
    assert proc.returncode == 0
    from robot_rl.cli.main import COMMANDS, main

    for name in COMMANDS:  # each subcommand's parser, in this process (a subprocess each took ~2 s)
        assert name in proc.stdout
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0 and "usage: robot-rl" in capsys.readouterr().out
    assert _cli().returncode == 2  # no subcommand: help and a usage error


@pytest.mark.slow
def test_doctor_reports_versions_rmw_and_rendering() -> None:
    proc = _cli("doctor", "--json")
    report = {c["name"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 0, proc.stdout
    assert report["torch"]["detail"] == torch.__version__
    assert report["mujoco"]["detail"] == mujoco.__version__
    assert report["rmw"]["detail"] == "rmw_fastrtps_cpp"
    assert "egl" in report["render"]["detail"]
    assert report["gpu"]["ok"] == torch.cuda.is_available()
    assert all(report[f"model:{r}"]["ok"] for r in ("panda", "g1", "cf2x"))


@pytest.mark.slow
def test_doctor_names_the_fix_when_something_is_missing() -> None:
    code = ("import sys; sys.modules['rosbags'] = None\n"
            "from robot_rl.cli.main import main; sys.exit(main(['doctor', '--no-render']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "[FAIL] rosbags" in proc.stdout and "fix: pip install 'rosbags<0.12,>=0.11'" in proc.stdout


@pytest.mark.slow
def test_online_roles_run_from_the_core_entry_point(tmp_path: Path) -> None:
    """Child processes start with ``python -m robot_rl.learners.roles`` (no detour through robot_rl.cli);
    ``robot-rl online learner|actor`` reaches the same functions and reports a missing run config alike."""
    from robot_rl.learners.roles import command

    cmd = command("actor", str(tmp_path), "--index", "3")
    assert cmd[1:] == ["-m", "robot_rl.learners.roles", "actor", "--run", str(tmp_path),
                       "--exit-with-parent", str(os.getpid()), "--index", "3"]  # a child stops when we are gone
    for argv in ([*cmd[1:]], ["-m", "robot_rl.cli.main", "online", "learner", "--run", str(tmp_path)]):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and "online.yaml" in proc.stdout + proc.stderr, proc.stderr


def test_demo_settings_come_from_the_options() -> None:
    import argparse

    from robot_rl.cli import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    args = parser.parse_args(["--out", "x", "--episodes", "3", "--set", "actor.seed=5", "--skip-to", "evaluation"])
    settings = demo.DemoSettings.from_args(args)
    assert settings.out == Path("x") and settings.episodes == 3 and settings.overrides == ["actor.seed=5"]
    assert not settings.pixels and args.skip_to == "evaluation"


def test_demo_rl_episode_budget_paces_the_learner() -> None:
    """--rl-episodes: that many actor episodes and a learner at most one publication behind; --rl-set applies
    to the RL config (and may choose another lag); --rl-seconds alone keeps the config's unpaced learner."""
    import argparse

    from robot_rl.cli import demo, demo_rl

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)

    def config(*options: str):  # type: ignore[no-untyped-def]
        return demo_rl.rl_config(demo.DemoSettings.from_args(parser.parse_args(list(options))))

    paced = config("--rl-episodes", "7", "--rl-set", "learner.update_to_data=0.05")
    assert paced.actor.episodes == 7 and paced.learner.update_to_data == 0.05
    assert paced.learner.max_update_lag == paced.learner.publish_every > 0
    assert config("--rl-episodes", "7", "--rl-set", "learner.max_update_lag=3").learner.max_update_lag == 3
    clock = config("--rl-seconds", "30")
    assert clock.learner.max_update_lag == 0 and clock.actor.episodes > 10_000  # the wall clock ends it
    assert config("--rl-method", "residual", "--rl-episodes", "2").learner.algorithm == "residual"
    for bad in ("-1", "1.5", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--rl-episodes", bad])


@pytest.mark.slow
def test_demo_with_pixels_trains_a_policy_that_sees_the_cube_only_through_its_cameras(tmp_path: Path) -> None:
    """--pixels: front and wrist cameras recorded, the camera config trained; no object or goal state."""
    import os

    os.environ.setdefault("MUJOCO_GL", "egl")
    from robot_rl.cli import demo
    from robot_rl.policies.base import Policy

    run = demo.Demo(demo.DemoSettings(out=tmp_path, episodes=1, bc_steps=2, pixels=True))
    run.demonstrations()
    run.behaviour_cloning()
    policy = Policy.load(tmp_path / "bc" / "policy")
    assert policy.image_keys == ["image_front", "image_wrist"]
    assert policy.spec.image_shapes["image_front"] == (64, 64, 3)
    assert not {"object_pos", "object_quat", "goal_pos"} & set(policy.state_keys)
    assert policy.aux_keys == ["object_pos"]  # the cube's position is a training label only
