"""The learning curve of a run: every evaluation appended to ``curve.jsonl`` and drawn into ``learning_curve.png``.

Success and final error are plotted against env steps (sample efficiency) and against wall time (what
a user waits for), side by side, because on a shared CPU the two tell different stories.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robot_rl.rl.evaluate import EvalResult


def strict_json(value: Any) -> Any:
    """NaN and inf (no error measured, no episode) as null, so the files are JSON that any parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def append_record(path: Path, result: EvalResult) -> None:
    """One JSON line per evaluation (aggregates only; the last evaluation's episodes go to eval.json)."""
    data = result.to_json()
    row = {k: data[k] for k in ("steps", "wall_s", "success_rate", "crash_rate", "error_mean", "error_max",
                                "tracking_error", "return_mean", "length_mean")}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(strict_json(row)) + "\n")


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
        top.plot(xs, [r["success_rate"] for r in rows], "o-", color="tab:green", label="success at the end")
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
