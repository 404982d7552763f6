"""``robot-rl doctor``'s optional features: each optional dependency with its version, the feature it enables
and the extra that installs it, taken from robot_rl's own metadata."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

from robot_rl.cli import doctor

REPO = Path(__file__).resolve().parents[1]


def _doctor(*args: str, code: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script = f"{code}\nimport sys\nfrom robot_rl.cli.main import main\nsys.exit(main({['doctor', *args]!r}))"
    # Out of the source tree: a stale robot_rl.egg-info there (left by `pip wheel .`) would shadow the metadata.
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})), cwd=Path(sys.executable).parent)


def test_every_optional_dependency_has_a_line() -> None:
    """Each distribution an extra declares (the dev tools and the ROS wheels aside: those are the message
    lines) and the lazily imported core ones are reported."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {Requirement(r).name for extra, reqs in project["optional-dependencies"].items()
                if extra not in ("dev", "ros") for r in reqs}
    reported = {opt.dist for opt in doctor.OPTIONAL} | {"lerobot"}
    assert declared <= reported, declared - reported
    assert {"numba", "cmaes", "rsl-rl-lib", "sentence-transformers"} <= reported
    root = ET.parse(REPO / "package.xml").getroot()
    messages = {e.text for e in root.findall("exec_depend") if re.search(r"_(msgs|srvs|interfaces)$", e.text or "")}
    assert set(doctor.ROS_MESSAGES) == messages  # the message packages robot_rl depends on, each with a line


def test_report_names_version_feature_and_extra() -> None:
    proc = _doctor("--json", "--no-render")
    report = {c["name"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 0, proc.stdout
    ray = report["ray"]
    assert (ray["ok"], ray["detail"], ray["required"]) == (True, importlib.metadata.version("ray"), False)
    assert "Ray cluster" in ray["enables"] and ray["install"] == "pip install 'robot_rl[fleet]'"
    assert report["cyclonedds"]["install"] == "pip install 'robot_rl[hardware]'"
    assert report["mujoco-warp"]["install"] == "pip install 'robot_rl[gpu]'"
    assert report["sentence-transformers"]["install"] == "pip install 'robot_rl[vla]'"  # pulled in by the MiniLM wheel
    assert report["numba"]["install"].startswith("pip install 'numba")  # a core dependency: its own bounds
    assert report["nav_msgs"]["ok"] and report["nav_msgs"]["required"]
    assert not report["tf2_msgs"]["required"] and "build_tf2_msgs.sh" in report["tf2_msgs"]["install"]
    assert all(c["enables"] and c["install"] for c in report.values() if c["name"] in {o.dist for o in doctor.OPTIONAL})


def test_a_missing_optional_dependency_says_what_is_lost_and_how_to_get_it() -> None:
    proc = _doctor("--no-render", code="import sys; sys.modules['ray'] = None; sys.modules['mcap'] = None")
    assert proc.returncode == 0, proc.stdout  # optional: the installation is still complete
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("[--  ] ray ")]
    assert "missing" in line and "robot-rl online run --ray" in line and "pip install 'robot_rl[fleet]'" in line
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("[--  ] mcap ")]
    assert "missing" in line and "robot_rl[viz]" in line


def test_a_version_outside_the_declared_bounds_is_called_untested() -> None:
    bounds = {"mujoco": ("", "<4.1,>=4.0")}
    assert doctor._bounds_note("mujoco", "3.2.0", bounds) == " (untested: robot_rl declares <4.1,>=4.0)"
    assert doctor._bounds_note("mujoco", "4.0.0", bounds) == ""
    assert doctor._bounds_note("torch", "2.13.0+cpu", {"torch": ("", "<3,>=2.13")}) == ""  # a local build is fine


def test_lerobot_is_found_in_its_own_interpreter(tmp_path: Path) -> None:
    """LeRobot needs Python >= 3.12 and its own torch: doctor asks the interpreter ROBOT_RL_LEROBOT_PYTHON names."""
    fake = tmp_path / "python3.12"
    fake.write_text("#!/bin/sh\necho 0.6.2\n")
    fake.chmod(0o755)
    bounds = doctor.declared()
    os.environ.pop("ROBOT_RL_LEROBOT_PYTHON", None)
    try:
        assert doctor.lerobot_check(bounds).detail == "missing"
        os.environ["ROBOT_RL_LEROBOT_PYTHON"] = str(fake)
        found = doctor.lerobot_check(bounds)
        assert (found.ok, found.detail) == (True, "0.6.2")
        os.environ["ROBOT_RL_LEROBOT_PYTHON"] = sys.executable  # this venv has no lerobot
        absent = doctor.lerobot_check(bounds)
        assert not absent.ok and "not importable" in absent.fix and "lerobot>=0.6" in absent.install
    finally:
        os.environ.pop("ROBOT_RL_LEROBOT_PYTHON", None)
