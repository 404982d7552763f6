"""Lint and type checks are part of the test suite, so they fail CI from day one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy(tmp_path: Path) -> None:
    """From a cold cache, as on CI's clean clone: the run costs the same everywhere, so the scheduler's
    recorded duration (``module_durations.json``) is the one CI pays and the module starts early."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_deprecated_rclpy_warn() -> None:
    """rclpy's ``logger.warn`` is a deprecation wrapper: every call goes through one call site, and rclpy
    refuses a throttled and an unthrottled call from the same site (a ValueError that killed a node)."""
    import re

    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "robot_rl").rglob("*.py"))
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"(get_logger\(\)|logger)\.warn\(", line)]
    assert not offenders, offenders
