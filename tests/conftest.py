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
# Under pytest-xdist the cores are shared out between the workers: one torch/OpenMP pool per core, not one
# per core per worker (oversubscribed OpenMP pools spin against each other). Subprocesses inherit it.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
# A test run started as a background job (`cmd &` without job control) inherits SIGINT ignored, and
# every process the tests start would inherit that too: Ctrl-C tests and graph shutdowns would hang.
restore_interrupt()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``extended`` tests are ``slow`` too (``-m "not slow"`` is the fast tier). Under pytest-xdist
    (``--dist loadgroup``) a module's tests stay together on one worker, in file order, so module fixtures are
    built once and tests that continue a module's story (one vehicle, one graph) see it whole; ``ray`` tests
    share one group: one Ray cluster at a time (each takes the dashboard's fixed port), and so do ``robot_dds``
    tests (a robot's DDS domain is fixed: two modules at once would hear each other's LowState)."""
    for item in items:
        if item.get_closest_marker("extended"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is None:
            shared = [name for name in ("ray", "robot_dds") if item.get_closest_marker(name)]
            group = shared[0] if shared else item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def fuzz_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder per fuzz module: its fixtures' templates and every generated input's copy."""
    return tmp_path_factory.mktemp("fuzz")


if os.environ.get("ROBOT_RL_TEST_CPU_LOG"):
    import json
    import resource
    import time

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
        """Per test: wall time and CPU time of this process and its reaped children (which tests wait)."""
        wall, me, kids = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF), \
            resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        me2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        row = {"test": item.nodeid, "wall": time.monotonic() - wall,
               "cpu": me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime,
               "cpu_children": kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime,
               "slow": item.get_closest_marker("slow") is not None}
        with open(os.environ["ROBOT_RL_TEST_CPU_LOG"], "a") as log:
            log.write(json.dumps(row) + "\n")
