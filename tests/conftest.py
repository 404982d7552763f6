"""Test-wide isolation: a private ROS 2 domain and log folder, headless rendering, seeded RNG."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from robot_rl.cli.main import restore_interrupt
from robot_rl.ros.isolation import isolated_ros_env

# Claimed once per test run (a file lock held for the whole pytest process); every subprocess a test
# starts inherits it, so parallel test runs on one machine never hear each other.
os.environ.update(isolated_ros_env())
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
# A test run started as a background job (`cmd &` without job control) inherits SIGINT ignored, and
# every process the tests start would inherit that too: Ctrl-C tests and graph shutdowns would hang.
restore_interrupt()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def fuzz_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder per fuzz module: its fixtures' templates and every generated input's copy."""
    return tmp_path_factory.mktemp("fuzz")
