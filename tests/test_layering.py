"""The package's layers only depend downwards: checked on the source of every module, not assumed.

The core (everything but ``robot_rl/cli`` and ``robot_rl/ros``) must be usable as a library: it never
reaches up into the command line or the ROS nodes, and modules talk to each other through public names
only, so a private helper can change without breaking another module. Imports inside functions count
too (an import test would not execute them). That the core never imports rclpy or ROS messages is
checked in ``test_imports.py``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import robot_rl

ROOT = Path(robot_rl.__file__).parent


@dataclass(frozen=True)
class Import:
    """One imported module (and, for ``from m import a, b``, the names) at a line of a module."""

    module: str
    target: str
    names: tuple[str, ...]
    where: str

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.where}: {self.target}{names}"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports() -> list[Import]:
    """Every import statement of every module, relative imports resolved to absolute names."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        where = str(path.relative_to(ROOT.parent))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out += [Import(module, a.name, (), f"{where}:{node.lineno}") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join([*base, *([target] if target else [])])
                out.append(Import(module, target, tuple(a.name for a in node.names), f"{where}:{node.lineno}"))
    return out


IMPORTS = _imports()


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _offenders(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """Imports of any of ``forbidden`` by modules outside ``packages``."""
    return [str(i) for i in IMPORTS if not any(_inside(i.module, p) for p in packages)
            and any(_inside(i.target, f) for f in forbidden)]


def test_the_walk_sees_the_imports() -> None:
    """Guards the checks below against passing because they look at nothing."""
    by_module = {i.module for i in IMPORTS}
    assert {"robot_rl.cli.main", "robot_rl.learners.online", "robot_rl.ros.learner_node"} <= by_module
    assert any(i.module == "robot_rl.ros.learner_node" and i.target.startswith("robot_rl.learners") for i in IMPORTS)


def test_only_the_command_line_imports_the_command_line() -> None:
    offenders = _offenders(("robot_rl.cli",), ("robot_rl.cli",))
    assert not offenders, "modules outside robot_rl/cli import it:\n" + "\n".join(offenders)


def test_only_the_ros_layer_imports_rclpy() -> None:
    """The ROS nodes adapt messages to the core; everything else (the command line too) stays free of rclpy."""
    offenders = _offenders(("robot_rl.ros",), ("rclpy",))
    assert not offenders, "modules outside robot_rl/ros import rclpy:\n" + "\n".join(offenders)


def test_the_core_does_not_import_the_ros_layer() -> None:
    """Only the top layer, the command line (``robot-rl launch`` runs a ROS graph), may use the nodes."""
    offenders = _offenders(("robot_rl.ros", "robot_rl.cli"), ("robot_rl.ros",))
    assert not offenders, "core modules import robot_rl/ros:\n" + "\n".join(offenders)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_names_across_modules() -> None:
    """``from robot_rl.x import _y`` (or ``import robot_rl.x._y``) from another module, or from another
    package for a private module, reaches into what ``x`` is free to change."""
    offenders = []
    for i in IMPORTS:
        if not _inside(i.target, "robot_rl"):
            continue
        parts = i.target.split(".")
        for k, part in enumerate(parts):
            # a private module (robot_rl.robots._mjspec) is public to its own package only
            if _private(part) and not _inside(i.module, ".".join(parts[:k])):
                offenders.append(str(i))
        if i.target != i.module:
            private = [n for n in i.names if _private(n)]
            # ``from robot_rl.robots import _mjspec`` inside robot_rl.robots is the module, not a name
            if private and not _inside(i.module, i.target):
                offenders.append(str(i))
    assert not offenders, "private names imported from other modules:\n" + "\n".join(sorted(set(offenders)))


def _robots_import_sim() -> list[str]:
    return [str(i) for i in IMPORTS if _inside(i.module, "robot_rl.robots") and _inside(i.target, "robot_rl.sim")]


@pytest.mark.xfail(bool(_robots_import_sim()), strict=True,
                   reason="robot_rl/sim/assets.py is being moved into robot_rl/robots (issue 14)")
def test_robot_models_do_not_import_the_simulation() -> None:
    """Robot models are built by the simulation, never the other way round."""
    offenders = _robots_import_sim()
    assert not offenders, "robot_rl/robots imports robot_rl/sim:\n" + "\n".join(offenders)
