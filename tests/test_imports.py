"""Every module imports, and the pure core never imports rclpy or ROS messages (checked, not assumed)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import robot_rl

ROOT = Path(robot_rl.__file__).parent
ALL_MODULES = sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], prefix="robot_rl."))
CORE_MODULES = [m for m in ALL_MODULES if not m.startswith("robot_rl.ros.") or m == "robot_rl.ros.isolation"]
ROS_PACKAGES = ("rclpy", "std_msgs", "sensor_msgs", "geometry_msgs", "trajectory_msgs", "std_srvs",
                "diagnostic_msgs", "builtin_interfaces", "rosgraph_msgs", "rcl_interfaces", "nav_msgs", "tf2_msgs")

# Importing these fails in a process where every ROS package is poisoned in sys.modules.
_BLOCKED_IMPORT = """
import importlib, sys
for name in {ros!r}:
    sys.modules[name] = None
failed = []
for module in {modules!r}:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        failed.append(f"{{module}}: {{exc}}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _import_without_ros(modules: list[str]) -> subprocess.CompletedProcess[str]:
    code = _BLOCKED_IMPORT.format(ros=ROS_PACKAGES, modules=modules)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_module_list_is_complete() -> None:
    assert "robot_rl.core.transition" in ALL_MODULES
    assert "robot_rl.ros.conversions" in ALL_MODULES
    assert len(CORE_MODULES) < len(ALL_MODULES)


@pytest.mark.parametrize("module", ALL_MODULES)
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.slow
def test_core_imports_without_ros() -> None:
    proc = _import_without_ros(CORE_MODULES)
    assert proc.returncode == 0, f"core modules need ROS:\n{proc.stdout}{proc.stderr}"


def test_ros_blocker_really_blocks() -> None:
    """The check above would catch a core module that imports ROS: the ROS layer fails under it."""
    proc = _import_without_ros(["robot_rl.ros.conversions"])
    assert proc.returncode == 1 and "robot_rl.ros.conversions" in proc.stdout


def test_no_ros_import_statement_in_core() -> None:
    """Also catches imports hidden inside functions, which an import test would not execute."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        if module not in CORE_MODULES and module not in ("robot_rl", "robot_rl.ros"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module}: {n}" for n in names if n.split(".")[0] in ROS_PACKAGES]
    assert not offenders, offenders
