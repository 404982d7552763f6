"""Benchmark and helper scripts name only what the package still has.

Nothing imports ``benchmarks/*.py`` in the suite, and many of their package imports sit inside functions
(they run in spawned processes), so a module that moves or a name that goes would only show when someone
re-runs a benchmark. Every ``from robot_rl.x import y`` and ``import robot_rl.x`` in them is resolved here.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*(REPO / "benchmarks").rglob("*.py"), *(REPO / "scripts").rglob("*.py")])


def _unresolved(path: Path) -> list[str]:
    missing = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("robot_rl"):
            assert node.module is not None
            try:
                module = importlib.import_module(node.module)
            except ImportError as exc:
                missing.append(f"{path.name}:{node.lineno}: {node.module} ({exc})")
                continue
            for alias in node.names:
                if hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    missing.append(f"{path.name}:{node.lineno}: {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("robot_rl"):
                    try:
                        importlib.import_module(alias.name)
                    except ImportError as exc:
                        missing.append(f"{path.name}:{node.lineno}: {alias.name} ({exc})")
    return missing


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) > 20 and any(p.name == "fleet_transport.py" for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_package_import_of_a_script_resolves(path: Path) -> None:
    missing = _unresolved(path)
    assert not missing, "names the package no longer has:\n" + "\n".join(missing)
