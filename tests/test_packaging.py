"""The package installs like a ROS 2 ament_python package: share/ folders, ament index marker, scripts."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = ("launch", "config", "controllers", "sim")


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools' build/ folder must not land in (or go stale in) the source tree.
    src = tmp_path_factory.mktemp("src") / "robot_rl"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", "outputs", "runs", "*.zarr"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("robot_rl-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_wheel_installs_share_folders_and_ament_marker(wheel_files: set[str]) -> None:
    data = "robot_rl-0.1.0.data/data/"
    assert f"{data}share/ament_index/resource_index/packages/robot_rl" in wheel_files
    assert f"{data}share/robot_rl/package.xml" in wheel_files
    for folder in SHARED:
        expected = {f"{data}share/robot_rl/{p.relative_to(REPO)}" for p in (REPO / folder).rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts}
        assert expected, f"{folder}/ is empty: nothing to install"
        assert expected <= wheel_files, sorted(expected - wheel_files)
    assert "robot_rl/core/transition.py" in wheel_files
    assert "robot_rl/py.typed" in wheel_files


def test_console_scripts_declared(wheel_files: set[str]) -> None:
    assert any(n.endswith("entry_points.txt") for n in wheel_files)
    import importlib.metadata

    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.value.startswith("robot_rl.")}
    assert scripts["robot-rl"] == "robot_rl.cli.main:main"
    for target in scripts.values():  # every entry point resolves to a callable
        module, func = target.split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func))


def test_setup_cfg_puts_node_executables_where_ros2_run_looks() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    assert cfg["develop"]["script_dir"] == "$base/lib/robot_rl"
    assert cfg["install"]["install_scripts"] == "$base/lib/robot_rl"
    assert (REPO / "resource" / "robot_rl").is_file()


def test_package_xml_is_format3_ament_python_with_dependencies() -> None:
    root = ET.parse(REPO / "package.xml").getroot()
    assert root.tag == "package" and root.get("format") == "3"
    assert root.findtext("name") == "robot_rl"
    assert root.find("export/build_type").text == "ament_python"  # type: ignore[union-attr]
    deps = {e.text for e in root.findall("exec_depend")}
    assert {"rclpy", "std_msgs", "sensor_msgs", "geometry_msgs", "trajectory_msgs", "std_srvs",
            "diagnostic_msgs"} <= deps
    maintainer = root.find("maintainer")
    assert maintainer is not None and "@" in (maintainer.get("email") or "")
