"""Shared settings and tallies of the property-based fuzz tests and the fault drills.

The default suite runs a few hundred generated inputs per entry point, derandomized (the same inputs on
every run, so CI is reproducible). ``benchmarks/reliability_drills.py`` runs the same tests with
``ROBOT_RL_FUZZ_CASES`` (e.g. 10 000 inputs each, freshly random) and ``ROBOT_RL_DRILL_TALLY`` set to a
folder; :func:`tally` and :func:`record_fault` then write what each input and each fault did there, and the
script turns them into the table in README.md and benchmarks/README.md.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

CASES_ENV = "ROBOT_RL_FUZZ_CASES"
"""Overrides every fuzz test's number of generated inputs (the drill script sets 10 000)."""
TALLY_ENV = "ROBOT_RL_DRILL_TALLY"
"""A folder: when set, tallies and fault records are written there (one file per process)."""

_counts: Counter[tuple[str, str]] = Counter()
T = TypeVar("T")


def cases(default: int, drill_share: int = 1) -> int:
    """Number of generated inputs of one test: ``default`` in the suite; in a drill, the drill's count per
    entry point divided by ``drill_share``, the number of tests that feed the same entry point (their
    inputs add up to the drill's count there)."""
    value = os.environ.get(CASES_ENV)
    return -(-int(value) // drill_share) if value else default


def fuzz_settings(default_cases: int = 200, drill_share: int = 1, **overrides: Any) -> settings:
    """Hypothesis settings of every fuzz test: no deadline (loaded CI), no example database, derandomized in
    the suite (reproducible) and random in a drill (new inputs every run)."""
    drill = bool(os.environ.get(CASES_ENV))
    base: dict[str, Any] = dict(max_examples=cases(default_cases, drill_share), deadline=None, derandomize=not drill,
                                database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow,
                                                                      HealthCheck.data_too_large,
                                                                      HealthCheck.filter_too_much])
    base.update(overrides)
    return settings(**base)


def bounded(fn: Callable[..., T], *args: Any, cpu_s: float, wall_s: float = 30.0) -> T:
    """``fn(*args)``, asserting it used under ``cpu_s`` of this thread's CPU time and ``wall_s`` of wall time.

    A pathological slow path or an endless loop burns CPU; wall time alone would also count the preemption of
    a loaded machine (a drill runs at low priority), so it only bounds hangs that wait.
    """
    cpu0, wall0 = time.thread_time(), time.monotonic()
    out = fn(*args)
    cpu, wall = time.thread_time() - cpu0, time.monotonic() - wall0
    assert cpu < cpu_s, f"one input took {cpu:.2f} s of CPU (bound {cpu_s} s)"
    assert wall < wall_s, f"one input took {wall:.1f} s (bound {wall_s} s)"
    return out


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` ({} if absent), lock files aside (opening a store for append creates
    one): what "nothing stored lost or changed" compares."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".writer.lock"}


def exported_dataset(folder: Path, name: str) -> tuple[Path, Path]:
    """A tiny episode store ``folder/name.zarr`` (two synthetic episodes, one camera) and its LeRobot v3 export
    ``folder/lr``: the sound template that file and CLI fuzzing damage or point at. Returns (store, dataset)."""
    from robot_rl.data import DatasetInfo, EpisodeStore
    from robot_rl.data.lerobot_export import export_lerobot
    from robot_rl.data.synthetic import synthetic_episode

    store = EpisodeStore.create(folder / f"{name}.zarr", DatasetInfo(robot="panda", fps=10.0, task="pick"))
    for i, n in enumerate((5, 3)):
        store.add_episode(synthetic_episode(i, n, cameras=1, size=32, joints=3), task="pick")
    store.close()
    export_lerobot(EpisodeStore.open(folder / f"{name}.zarr"), folder / "lr", progress=False)
    return folder / f"{name}.zarr", folder / "lr"


def fresh_copy(template: Path, work: Path) -> Path:
    """A private copy of the folder ``template`` under ``work``, for one generated input to damage."""
    dest = Path(tempfile.mkdtemp(dir=work))
    shutil.copytree(template, dest / template.name)
    return dest / template.name


def tally(entry_point: str, outcome: str) -> None:
    """Count one generated input at ``entry_point`` and what became of it (``accepted``, ``refused: <why>``)."""
    if os.environ.get(TALLY_ENV):
        _counts[(entry_point, outcome)] += 1


def outcome_of(entry_point: str, call: Callable[[], T], refusals: tuple[type[BaseException], ...] = (ValueError,)
               ) -> T | None:
    """Run ``call``; tally ``accepted`` or ``refused: <ExceptionType>`` (only ``refusals`` are refusals: any
    other exception propagates and fails the property). Returns the result, or None when refused."""
    try:
        result = call()
    except refusals as exc:
        tally(entry_point, f"refused: {type(exc).__name__}")
        return None
    tally(entry_point, "accepted")
    return result


def record_fault(fault: str, *, happened: str, recovery_s: float | None, lost: str, robot: str,
                 **extra: Any) -> None:
    """One fault drill's result: what happened, seconds to recover (None: not applicable), what was lost
    (``nothing`` or a count) and what the robot did (``held``, ``damped``, ``stopped``, ``n/a``)."""
    folder = os.environ.get(TALLY_ENV)
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    line = {"fault": fault, "happened": happened, "recovery_s": recovery_s, "lost": lost, "robot": robot,
            "time": time.time(), **extra}
    with open(Path(folder) / f"faults-{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@atexit.register
def _flush() -> None:
    folder = os.environ.get(TALLY_ENV)
    if not folder or not _counts:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"tally-{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
        for (entry, outcome), n in sorted(_counts.items()):
            f.write(json.dumps({"entry_point": entry, "outcome": outcome, "count": n}) + "\n")
    _counts.clear()
