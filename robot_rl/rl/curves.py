"""The learning curve of a run: every evaluation appended to ``curve.jsonl`` and drawn into ``learning_curve.png``.

:func:`eval_row` reads an evaluation (robot_rl.training.evaluate's :class:`EvalReport`, from its vector
driver) as this package reports it: ``success_at_last_step`` (the task held at the end, what
``target_success`` reads) beside the runtime's ``success_rate`` (success at any step). Success and final
error are plotted against env steps (sample efficiency) and against wall time (what
a user waits for), side by side, because on a shared CPU the two tell different stories.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.training.evaluate import EvalReport

ROW_KEYS = ("steps", "wall_s", "success_rate", "success_at_last_step", "crash_rate", "error_mean", "error_max",
            "tracking_error", "return_mean", "length_mean")
"""Keys of a curve row (and of summary.json's ``final``)."""


def strict_json(value: Any) -> Any:
    """NaN and inf (no error measured, no episode) as null, so the files are JSON that any parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def eval_row(report: EvalReport, steps: int, wall_s: float) -> dict[str, float]:
    """An evaluation's aggregates at ``steps`` env steps and ``wall_s`` seconds into the run.

    ``success_rate``: the runtime's success (at any step); ``success_at_last_step``: ``is_success`` at the
    last step; ``crash_rate``: ended by the task (terminated) without success at the last step;
    ``error_mean`` / ``error_max``: the final error's; ``tracking_error``: the error averaged over each
    episode, then over episodes (NaN without ``error_keys``).
    """
    at_end = np.asarray(report.extra.get("success_at_last_step", np.zeros(len(report.failures))), bool)
    crashed = np.asarray(report.failures, bool) & ~at_end
    return {"steps": steps, "wall_s": wall_s, "success_rate": report.success_rate,
            "success_at_last_step": report.extra_mean("success_at_last_step"),
            "crash_rate": float(crashed.mean()) if crashed.size else 0.0,
            "error_mean": report.extra_mean("final_error"), "error_max": report.extra_max("final_error"),
            "tracking_error": report.extra_mean("episode_error"),
            "return_mean": float(np.mean(report.returns)) if report.returns else math.nan,
            "length_mean": float(np.mean(report.lengths)) if report.lengths else math.nan}


def row_summary(row: dict[str, float], episodes: int) -> str:
    """One line for the terminal."""
    n = episodes
    err = "" if math.isnan(row["error_mean"]) else (f", final error mean {100 * row['error_mean']:.1f} cm, "
                                                    f"max {100 * row['error_max']:.1f} cm, over the episodes "
                                                    f"{100 * row['tracking_error']:.1f} cm")
    return (f"{round(row['success_at_last_step'] * n)}/{n} succeed at the end "
            f"({round(row['success_rate'] * n)}/{n} at some step), {round(row['crash_rate'] * n)}/{n} crash{err}, "
            f"{row['length_mean']:.0f} steps on average (after {row['steps']} env steps, {row['wall_s']:.1f} s)")


def append_record(path: Path, row: dict[str, float]) -> None:
    """One JSON line per evaluation (aggregates only; the last evaluation's episodes go to eval.json)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(strict_json({k: row[k] for k in ROW_KEYS})) + "\n")


def read_records(path: Path) -> list[dict[str, float]]:
    """The rows :func:`append_record` wrote."""
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{k: math.nan if v is None else v for k, v in row.items()} for row in rows]


def plot_curve(rows: Sequence[dict[str, float]], path: Path, title: str, target_error: float | None = None) -> Path:
    """2 x 2 figure: success rate and final error (or return) vs env steps and vs wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_error = any(not math.isnan(r["error_mean"]) for r in rows)
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharey="row")
    for col, (xkey, xlabel) in enumerate((("steps", "env steps"), ("wall_s", "wall time [s]"))):
        xs = [r[xkey] for r in rows]
        top, bottom = axes[0][col], axes[1][col]
        top.plot(xs, [r["success_at_last_step"] for r in rows], "o-", color="tab:green", label="success at the end")
        top.plot(xs, [r["crash_rate"] for r in rows], "x--", color="tab:red", label="crashed")
        top.set_ylim(-0.05, 1.05)
        top.grid(alpha=0.3)
        if has_error:
            bottom.plot(xs, [100 * r["error_mean"] for r in rows], "o-", label="mean")
            bottom.plot(xs, [100 * r["error_max"] for r in rows], "^--", label="max")
            bottom.plot(xs, [100 * r.get("tracking_error", math.nan) for r in rows], "s:", label="over the episode")
            bottom.set_yscale("log")
            if target_error is not None:
                bottom.axhline(100 * target_error, color="gray", lw=0.8, ls=":", label=f"{100 * target_error:g} cm")
        else:
            bottom.plot(xs, [r["return_mean"] for r in rows], "o-", label="mean return")
        bottom.set_xlabel(xlabel)
        bottom.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("fraction of eval episodes")
    axes[1][0].set_ylabel("error [cm] (final; mean over the episode)" if has_error else "return")
    axes[0][0].legend(loc="best", fontsize=8)
    axes[1][0].legend(loc="best", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
