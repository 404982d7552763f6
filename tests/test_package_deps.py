"""package.xml declares exactly the ROS packages the code uses: rosdep installs what an import needs, and no
dependency outlives its last import (both directions, read from the source, not assumed)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import robot_rl

REPO = Path(robot_rl.__file__).parent.parent
ROS_RUNTIME = {"rclpy", "launch", "launch_ros", "ament_index_python"}
"""ROS packages without a message suffix (the rest are recognised by ``_msgs``, ``_srvs``, ``_interfaces``)."""
MESSAGE_PACKAGE = re.compile(r"^[a-z][a-z0-9_]*_(msgs|srvs|interfaces)$")
TYPE_NAME = re.compile(r"\b([a-z][a-z0-9_]*)/(?:msg|srv)/[A-Z]\w*")
"""``pkg/msg/Type`` in a launch or config file (e.g. the safety node's watched_types)."""


def _ament_packages() -> set[str]:
    index = Path(sys.prefix) / "share" / "ament_index" / "resource_index" / "packages"
    return {p.name for p in index.iterdir()} if index.is_dir() else set()


def _is_ros(name: str, installed: set[str]) -> bool:
    return name in ROS_RUNTIME or bool(MESSAGE_PACKAGE.match(name)) or (name in installed and name != "robot_rl")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def used_ros_packages() -> dict[str, list[str]]:
    """ROS package -> the files that use it: imports in robot_rl/ and launch/*.py, message types named in
    launch and config files, and launch_ros for the YAML launch files' node entries."""
    installed = _ament_packages()
    used: dict[str, list[str]] = {}
    sources = [*sorted((REPO / "robot_rl").rglob("*.py")), *sorted((REPO / "launch").glob("*.py"))]
    for path in sources:
        for name in _imports(path):
            if _is_ros(name, installed):
                used.setdefault(name, []).append(str(path.relative_to(REPO)))
    for path in [*sorted((REPO / "launch").glob("*.yaml")), *sorted((REPO / "config").rglob("*.yaml"))]:
        text = path.read_text()
        for name in TYPE_NAME.findall(text):
            used.setdefault(name, []).append(str(path.relative_to(REPO)))
        if path.parent.name == "launch" and re.search(r"(?m)^\s*-?\s*node:", text):
            used.setdefault("launch_ros", []).append(str(path.relative_to(REPO)))
    return used


def declared() -> list[str]:
    root = ET.parse(REPO / "package.xml").getroot()
    return [e.text or "" for e in root.findall("exec_depend")]


def test_every_ros_import_is_an_exec_depend_and_every_exec_depend_is_used() -> None:
    used = used_ros_packages()
    ros_declared = {d for d in declared() if not d.startswith("python3-")}
    missing = {name: files[:3] for name, files in used.items() if name not in ros_declared}
    assert not missing, f"imported but not in package.xml: {missing}"
    unused = ros_declared - set(used)
    assert not unused, f"in package.xml but used nowhere: {sorted(unused)}"
    assert {"nav_msgs", "tf2_msgs", "ament_index_python", "rclpy"} <= set(used)  # the scan finds real imports


def test_no_hard_rmw_dependency_and_no_duplicates() -> None:
    deps = declared()
    assert not [d for d in deps if d.startswith("rmw")], "an RMW is the install's choice, not a dependency"
    assert len(deps) == len(set(deps))
