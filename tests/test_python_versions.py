"""The package must stay valid Python 3.10-3.12 (ROS 2 Humble, Jazzy, Kilted): compile it with each one here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Real interpreters only (pyenv shims answer "command not found" for versions that are not selected).
PYENV = Path.home() / ".pyenv" / "versions"
FOUND = sorted(p for minor in ("3.10", "3.12") for p in PYENV.glob(f"{minor}.*/bin/python") if p.is_file())


@pytest.mark.parametrize("python", FOUND, ids=lambda p: p.parent.parent.name)
def test_package_compiles(python: Path) -> None:
    proc = subprocess.run([str(python), "-m", "compileall", "-q", "robot_rl", "launch", "tests"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_python_3_11_only_apis() -> None:
    pattern = re.compile(r"\b(StrEnum|tomllib|ExceptionGroup|typing\.Self)\b|from typing import [^\n]*\bSelf\b")
    offenders = [f"{p.relative_to(REPO)}:{i}" for p in (REPO / "robot_rl").rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders
