"""The robot-rl command line: subcommands listed, doctor reports real versions."""

from __future__ import annotations

import json
import subprocess
import sys

import mujoco
import torch


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "robot_rl.cli.main", *args], capture_output=True, text=True,
                          timeout=300)


def test_help_lists_subcommands() -> None:
    proc = _cli("--help")
    assert proc.returncode == 0
    from robot_rl.cli.main import COMMANDS

    for name in COMMANDS:
        assert name in proc.stdout
        sub = _cli(name, "--help")
        assert sub.returncode == 0 and "usage: robot-rl" in sub.stdout, sub.stderr
    assert _cli().returncode == 2  # no subcommand: help and a usage error


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


def test_doctor_names_the_fix_when_something_is_missing() -> None:
    code = ("import sys; sys.modules['rosbags'] = None\n"
            "from robot_rl.cli.main import main; sys.exit(main(['doctor', '--no-render']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "[FAIL] rosbags" in proc.stdout and "fix: pip install rosbags" in proc.stdout
