"""Test-wide isolation: a private ROS 2 domain and log folder, headless rendering, seeded RNG."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robot_rl.cli.main import restore_interrupt
from robot_rl.core.scheduling import (
    autogroup_effective,
    own_autogroup,
    set_autogroup_nice,
    set_schedule,
    thread_schedules,
)
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


DURATIONS = Path(__file__).with_name("module_durations.json")
"""Per test module of a parallel full run: its seconds and the seconds of its realtime tests
(``benchmarks/test_tiers.py --durations-from LOG`` writes it)."""
UNKNOWN_MODULE_S = 10.0


def _module_durations() -> dict[str, dict[str, float]]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``extended`` tests are ``slow`` too (``-m "not slow"`` is the fast tier). ``ros``, ``robot_dds`` and
    ``ray`` tests are ``realtime`` unless they say otherwise: they start processes that run on the wall clock, and
    under pytest-xdist they get the CPU first and never run beside each other (``_MachineShare``), which keeps two Ray
    clusters (each on the dashboard's fixed port) or two robots on one DDS domain (Unitree: 0) from meeting.
    ``--dist loadfile`` keeps a module's tests on one worker, in file order, so module fixtures are built once
    and tests that continue a module's story (one vehicle, one graph) see it whole; modules are handed out
    longest first (``module_durations.json``)."""
    for item in items:
        if item.get_closest_marker("extended"):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("realtime") is None and \
                any(item.get_closest_marker(name) for name in ("ros", "robot_dds", "ray")):
            item.add_marker(pytest.mark.realtime)
    if _workers > 1:  # longest modules first (--no-loadscope-reorder keeps this order): no long tail at the end
        known = _module_durations()
        rank = {path: -known.get(path, {}).get("seconds", UNKNOWN_MODULE_S)
                for path in {item.nodeid.split("::")[0] for item in items}}
        items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: file order within a module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with one worker for the modules that hold realtime tests (see :class:`_MachineShare`)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RealtimeOnOneWorker(LoadFileScheduling):
        """Realtime tests never run beside each other, so a second worker that reaches a realtime module while
        the first runs one only waits (up to 280 s of one run's 1 770 s). The first worker to ask takes the
        realtime modules, longest first, and ordinary ones once they are done; the others take ordinary modules
        and a realtime one only when nothing else is left. Every worker's first module is the longest ordinary
        one left (longest first: the end-to-end trainings, minutes each, never start at the end of a run).
        Which modules are realtime, and how long each takes: module_durations.json."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            self.realtime = {path for path, row in _module_durations().items() if row.get("realtime_s", 0.0) > 0}
            self.owner: Any = None
            self.started: set[Any] = set()

        def _assign_work_unit(self, node: Any) -> None:
            if node not in self.started:
                self.started.add(node)
            elif self.owner is None and any(scope in self.realtime for scope in self.workqueue):
                self.owner = node
            want = (lambda scope: scope in self.realtime) if node is self.owner else \
                (lambda scope: scope not in self.realtime)
            pick = next((scope for scope in self.workqueue if want(scope)), None)
            if pick is not None:
                self.workqueue.move_to_end(pick, last=False)
            super()._assign_work_unit(node)

    return RealtimeOnOneWorker(config, log)


_REALTIME_POLICIES = {getattr(os, name) for name in ("SCHED_FIFO", "SCHED_RR") if hasattr(os, name)}
_STARTED_REALTIME = os.sched_getscheduler(0) in _REALTIME_POLICIES if hasattr(os, "sched_getscheduler") else True


@pytest.fixture(autouse=True)
def _test_process_keeps_normal_scheduling() -> Iterator[None]:
    """A test that leaves this process on real-time scheduling fails (and the threads are put back): every
    later test, and every process started from here, would inherit it. (SVT-AV1 did, as root: FIFO 99.)"""
    yield
    if _STARTED_REALTIME:
        return
    raised = {tid: s for tid, s in thread_schedules().items() if s[0] in _REALTIME_POLICIES}
    for tid in raised:
        set_schedule(tid, (os.SCHED_OTHER, 0))
    if raised:
        pytest.fail(f"{len(raised)} thread(s) of the test process left on real-time scheduling "
                    f"(policy, priority): {sorted(set(raised.values()))}", pytrace=False)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def fuzz_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scratch folder per fuzz module: its fixtures' templates and every generated input's copy."""
    return tmp_path_factory.mktemp("fuzz")


MACHINE, BESIDE, NONE = "machine", "beside", "none"
"""``realtime`` modes: ``realtime`` (= ``realtime("machine")``) has the machine to itself, or with background
sharing runs beside ordinary tests that take only what it leaves; ``realtime("beside")`` waits on the wall clock
with little CPU of its own (a vendor client flying an emulator): it runs beside ordinary tests either way; neither
ever runs beside another realtime test; ``realtime("none")`` opts a ``ros`` test out (in-process
nodes whose callbacks are called directly)."""


def realtime_mode(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("realtime")
    mode = None if marker is None else (marker.args[0] if marker.args else MACHINE)
    if mode not in (None, MACHINE, BESIDE, NONE):
        raise pytest.UsageError(f"{item.nodeid}: realtime mode {mode!r} is not one of machine, beside, none")
    return None if mode == NONE else mode


class _MachineShare:
    """Under pytest-xdist, ``realtime`` tests must get the CPU they were promised: a test that times a live
    graph (a 100 Hz log, a vehicle holding altitude, a node noticing a stale topic) fails when another
    worker's training takes the cores. Realtime tests never run beside each other (one exclusive lock).

    Where autogroups decide CPU shares (:func:`robot_rl.core.scheduling.autogroup_effective`) and this worker
    may lower its group's nice value again, each worker leads a session of its own and ordinary tests run at
    autogroup nice 19 (their subprocesses too): beside a realtime test at nice 0 they take only the CPU its
    graph leaves, so the cores are not idle while a graph waits on the wall clock (``background``).
    Elsewhere (or with ``ROBOT_RL_TEST_SHARE=exclusive``) a realtime test has the machine to itself: a
    readers-writer lock on one file, every ordinary test holds it shared while it runs (setup, call,
    teardown); a run of consecutive realtime tests holds it exclusively, from the first one's setup to the
    last one's teardown (module fixtures included), and a turnstile lock admits waiting realtime workers
    ahead of new shared holders so they are not starved. ``beside`` tests hold it shared plus the lock that
    keeps realtime tests apart."""

    def __init__(self, stem: Path, background: bool) -> None:
        self.main, self.turnstile, self.beside = (os.open(f"{stem}.{name}", os.O_RDWR | os.O_CREAT, 0o600)
                                                  for name in ("main", "turnstile", "beside"))
        self.background = background
        self.held: str | None = None  # the mode whose locks this worker still holds from the previous test

    def before(self, mode: str | None) -> None:
        if self.held is not None:
            if self.held == mode:
                return
            self.release()
        if self.background:
            if mode is None:
                set_autogroup_nice(BACKGROUND_NICE)
            else:
                fcntl.flock(self.beside, fcntl.LOCK_EX)
                if not set_autogroup_nice(0):
                    raise RuntimeError("this worker's autogroup refused nice 0 after accepting it at start")
        elif mode == MACHINE:
            fcntl.flock(self.turnstile, fcntl.LOCK_EX)
            fcntl.flock(self.main, fcntl.LOCK_EX)
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        else:
            if mode == BESIDE:
                fcntl.flock(self.beside, fcntl.LOCK_EX)
            fcntl.flock(self.turnstile, fcntl.LOCK_SH)
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
            fcntl.flock(self.main, fcntl.LOCK_SH)
        self.held = mode

    def after(self, mode: str | None, next_mode: str | None) -> None:
        """Keeps the locks across consecutive realtime tests of one mode; ordinary tests let go after each."""
        if mode is None or next_mode != mode:
            self.release()

    def release(self) -> None:
        fcntl.flock(self.main, fcntl.LOCK_UN)
        fcntl.flock(self.beside, fcntl.LOCK_UN)
        self.held = None


BACKGROUND_NICE = 19


def _exclusive_reason() -> str | None:
    """Why realtime tests must have the machine to themselves here, or None if the background share may apply."""
    if os.environ.get("ROBOT_RL_TEST_SHARE", "background") == "exclusive":
        return "ROBOT_RL_TEST_SHARE"
    if not autogroup_effective():
        return "autogroups do not decide CPU shares here"
    return None


def _background_share() -> bool:
    """Whether this xdist worker can run ordinary tests in the background (see :class:`_MachineShare`)."""
    if _exclusive_reason() is not None:
        return False
    return own_autogroup() and set_autogroup_nice(BACKGROUND_NICE) and set_autogroup_nice(0)


_share = (_MachineShare(Path(tempfile.gettempdir()) / f"robot_rl-pytest-{os.environ['PYTEST_XDIST_TESTRUNUID']}",
                        _background_share())
          if _workers > 1 and os.environ.get("PYTEST_XDIST_TESTRUNUID") else None)


def pytest_configure(config: pytest.Config) -> None:
    """robot_rl's bytecode, written once per run by the controller: under ``PYTHONDONTWRITEBYTECODE`` (set in
    some containers and CI images) every node, actor and learner process a test starts would compile the
    package's sources again (~0.1 s of CPU each, hundreds of processes per run)."""
    if not hasattr(config, "workerinput"):
        import compileall

        import robot_rl

        compileall.compile_dir(Path(robot_rl.__file__).parent, quiet=1)


def pytest_report_header(config: pytest.Config) -> str:
    """How realtime tests will share the machine under pytest-xdist (CI keeps only the output of failed runs)."""
    reason = _exclusive_reason()
    if reason is not None:
        return f"machine share: exclusive ({reason})"
    return "machine share: background (ordinary tests at autogroup nice 19) where workers may lower it again, " \
        f"else exclusive; euid {os.geteuid()}"


def _share_name() -> str:
    return "one process" if _share is None else ("background" if _share.background else "exclusive")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker tells the controller which share it ran with (for the summary below)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["machine_share"] = _share_name()


_worker_shares: dict[str, str] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    output = getattr(node, "workeroutput", None) or {}
    _worker_shares[str(getattr(node.gateway, "id", "?"))] = str(output.get("machine_share", "?"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The share each worker really ran with, at the end where CI's kept tail shows it."""
    shares = ", ".join(f"{w} {s}" for w, s in sorted(_worker_shares.items())) or _share_name()
    terminalreporter.write_line(f"machine share: {shares}; {os.cpu_count()} CPUs, load average "
                                f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")


_cpu_log = os.environ.get("ROBOT_RL_TEST_CPU_LOG")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Takes the machine share (under pytest-xdist) around the whole test, then, with
    ``ROBOT_RL_TEST_CPU_LOG=<file>``, logs its wall time and the CPU time of this process and its reaped
    children (which tests wait for), the wait for the share not included."""
    mode = realtime_mode(item)
    if _share is not None:
        _share.before(mode)
    try:
        started, wall, me, kids = time.time(), time.monotonic(), resource.getrusage(resource.RUSAGE_SELF), \
            resource.getrusage(resource.RUSAGE_CHILDREN)
        yield
        if _cpu_log:
            me2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            row = {"test": item.nodeid, "start": started, "wall": time.monotonic() - wall,
                   "cpu": me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime,
                   "cpu_children": kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime,
                   "slow": item.get_closest_marker("slow") is not None, "realtime": mode,
                   "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                   "share": _share_name()}
            with open(_cpu_log, "a") as log:
                log.write(json.dumps(row) + "\n")
    finally:
        if _share is not None:
            _share.after(mode, None if nextitem is None else realtime_mode(nextitem))
