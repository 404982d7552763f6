"""What an online run's fleet is doing, for operators: ``<run>/fleet_status.json``, TensorBoard and a table.

The learner calls :meth:`FleetStatus.update` every ``fleet.status_every_s`` with its own counters and what
its transports know of each actor; rates (steps/s, updates/s) are differences between two updates.
``robot-rl online status RUN`` prints :func:`format_status` of the file; the same numbers go to
TensorBoard under ``<run>/tensorboard`` (learner/*, actor/<id>/*, task/<task>/*).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

STATUS_FILE = "fleet_status.json"


class FleetStatus:
    """Rates and the status file of one learner."""

    def __init__(self, run: str | Path, tensorboard: bool = True) -> None:
        self.run = Path(run)
        self._last: dict[str, tuple[float, float]] = {}
        self._writer: Any = None
        self._step = 0
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.run / "tensorboard"))
            except ImportError:  # tensorboard not installed: the JSON file and the table still work
                self._writer = None

    def _rate(self, key: str, value: float, now: float) -> float:
        last = self._last.get(key)
        self._last[key] = (now, value)
        if last is None or now <= last[0]:
            return 0.0
        return (value - last[1]) / (now - last[0])

    def update(self, learner: dict[str, Any], actors: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the status file (atomically) and the TensorBoard scalars; returns what was written."""
        now = time.time()
        learner = {**learner, "updates_per_s": self._rate("learner/updates", learner["updates"], now),
                   "steps_per_s": self._rate("learner/steps", learner["steps"], now)}
        version = int(learner.get("version", 0))
        rows: list[dict[str, Any]] = []
        tasks: dict[str, dict[str, Any]] = {}
        for a in actors:
            row = {**a, "steps_per_s": self._rate(f"actor/{a['actor']}/steps", a["steps"], now)}
            row["lag"] = version - a["version"] if a.get("version", -1) >= 0 else None
            rows.append(row)
            task = tasks.setdefault(str(a.get("task", "?")), {"actors": 0, "steps": 0, "interventions": 0,
                                                             "steps_per_s": 0.0})
            task["actors"] += 1
            task["steps"] += a["steps"]
            task["interventions"] += a.get("interventions", 0)
            task["steps_per_s"] += row["steps_per_s"]
        for name, stored in learner.get("task_steps", {}).items():  # in the buffers: survives learner restarts
            tasks.setdefault(name, {"actors": 0, "steps": 0, "interventions": 0, "steps_per_s": 0.0})["stored"] = stored
        status = {"time": now, "learner": learner, "actors": rows, "tasks": tasks}
        tmp = self.run / f".{STATUS_FILE}.tmp"
        tmp.write_text(json.dumps(status, indent=1), encoding="utf-8")
        os.replace(tmp, self.run / STATUS_FILE)
        if self._writer is not None:
            self._scalars(status)
        return status

    def _scalars(self, status: dict[str, Any]) -> None:
        self._step += 1
        w, step = self._writer, self._step
        lr = status["learner"]
        for key in ("updates", "updates_per_s", "steps", "steps_per_s", "human_steps", "version"):
            if isinstance(lr.get(key), (int, float)):
                w.add_scalar(f"learner/{key}", lr[key], step)
        for a in status["actors"]:
            for key in ("steps", "steps_per_s", "interventions", "lag"):
                if isinstance(a.get(key), (int, float)):
                    w.add_scalar(f"actor/{a['actor']}/{key}", a[key], step)
        for task, t in status["tasks"].items():
            for key in ("steps", "steps_per_s", "interventions", "actors", "stored"):
                if key in t:
                    w.add_scalar(f"task/{task.replace('/', '_')}/{key}", t[key], step)
        w.flush()

    def close(self) -> None:
        """Flush and close TensorBoard."""
        if self._writer is not None:
            self._writer.close()


def read_status(run: str | Path) -> dict[str, Any]:
    """The last status the learner of ``run`` wrote (FileNotFoundError when it never did)."""
    file = Path(run) / STATUS_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{run}: no {STATUS_FILE} (no learner has served this run yet)")
    return dict(json.loads(file.read_text(encoding="utf-8")))


def _ago(t: float | None, now: float) -> str:
    return "-" if not t else f"{now - t:.1f} s ago"


def format_status(status: dict[str, Any], now: float | None = None) -> str:
    """A plain-text report: the learner, then one row per actor, then one per task."""
    now = time.time() if now is None else now
    lr = status["learner"]
    buffers = ", ".join(f"{k} {v}" for k, v in lr.get("buffers", {}).items())
    lines = [f"learner on {lr.get('host', '?')} (pid {lr.get('pid', '?')}), status written {_ago(status['time'], now)}",
             f"  {lr['updates']} updates ({lr['updates_per_s']:.1f}/s), {lr['steps']} steps received "
             f"({lr['steps_per_s']:.0f}/s), {lr.get('human_steps', 0)} by humans; weights v{lr.get('version', 0)}"
             + (f" (deployed: the weights of v{lr['deployed']}, gated)" if lr.get("deployed") is not None else ""),
             f"  buffers: {buffers or '-'}; last checkpoint {_ago(lr.get('last_checkpoint'), now)}"
             + (f"; listening on {lr['listen']}" if lr.get("listen") else "")
             + (f"; FAILED: {lr['failure']}" if lr.get("failure") else "")]
    head = f"  {'actor':<16} {'host':<16} {'task':<28} {'steps':>8} {'steps/s':>8} {'lag':>4} {'human':>6}  last seen"
    lines += ["actors:", head]
    for a in status["actors"]:
        lag = "-" if a.get("lag") is None else str(a["lag"])
        lines.append(f"  {a['actor']:<16} {a.get('host', '?')!s:<16} {a.get('task', '?')!s:<28} "
                     f"{a['steps']:>8} {a['steps_per_s']:>8.0f} {lag:>4} {a.get('interventions', 0):>6}  "
                     f"{_ago(a.get('last_seen'), now)}")
    if not status["actors"]:
        lines.append("  (none connected)")
    lines.append("tasks:")
    for task, t in status["tasks"].items():
        lines.append(f"  {task:<34} {t['actors']} actor(s), {t['steps']} steps ({t['steps_per_s']:.0f}/s), "
                     f"{t['interventions']} human steps since the learner started; {t.get('stored', 0)} stored")
    return "\n".join(lines)


def this_host() -> str:
    """The name actors and the learner report for their machine."""
    return socket.gethostname()
