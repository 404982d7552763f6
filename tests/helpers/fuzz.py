"""Shared settings and tallies of the property-based fuzz tests and the fault drills.

The default suite runs a few hundred generated inputs per entry point, derandomized (the same inputs on
every run, so CI is reproducible). ``benchmarks/reliability_drills.py`` runs the same tests with
``ROBOT_RL_FUZZ_CASES`` (e.g. 10 000 inputs each, freshly random) and ``ROBOT_RL_DRILL_TALLY`` set to a
folder; :func:`tally` and :func:`record_fault` then write what each input and each fault did there, and the
script turns them into the table in README.md and benchmarks/README.md.
"""

from __future__ import annotations

import atexit
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


def cases(default: int, drill_cap: int | None = None) -> int:
    """Number of generated inputs for one entry point: ``default`` in the suite, the drill's count in a drill
    (at most ``drill_cap``: for inputs that each hold a real connection for a second)."""
    value = os.environ.get(CASES_ENV)
    n = int(value) if value else default
    return n if drill_cap is None or not value else min(n, drill_cap)


def fuzz_settings(default_cases: int = 200, drill_cap: int | None = None, **overrides: Any) -> settings:
    """Hypothesis settings of every fuzz test: no deadline (loaded CI), no example database, derandomized in
    the suite (reproducible) and random in a drill (new inputs every run)."""
    drill = bool(os.environ.get(CASES_ENV))
    base: dict[str, Any] = dict(max_examples=cases(default_cases, drill_cap), deadline=None, derandomize=not drill,
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
