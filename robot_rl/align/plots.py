"""Plots of the alignment: error against horizon per method, and recorded vs replayed trajectories overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.align.episodes import Segments
from robot_rl.align.layout import StateLayout
from robot_rl.align.replay import Gap, Rollout


def plot_horizon_errors(gaps: dict[str, Gap], layout: StateLayout, path: Path, title: str) -> Path:
    """One panel per error: mean over held-out segments against time since the replay started."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(layout.errors), figsize=(5 * len(layout.errors), 3.6), squeeze=False)
    for ax, name, unit in zip(axes[0], layout.errors, layout.units):
        for method, gap in gaps.items():
            curve = gap.curve(name)
            ax.plot(np.arange(len(curve)) * gap.dt, curve, label=method, lw=2 if method == "delta_action" else 1.2)
        ax.set_xlabel("time since replay start [s]")
        ax.set_ylabel(f"{name} error [{unit}]")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_overlay(seg: Segments, rollouts: dict[str, Rollout], layout: StateLayout, dt: float, path: Path,
                 title: str, index: int = 0) -> Path:
    """Recorded ("real") and replayed trajectories of one held-out window.

    Panels: the first three qpos and qvel values (a floating base's position and linear velocity; an arm's
    first joints).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q_real, v_real = seg.open_loop()
    t = np.arange(q_real.shape[1]) * dt
    qcols = [0, 1, 2] if layout.free_base else list(range(min(3, layout.nq)))
    fig, axes = plt.subplots(2, 3, figsize=(13, 6), squeeze=False)
    for col, k in enumerate(qcols):
        for row, (real, key) in enumerate(((q_real, "qpos"), (v_real, "qvel"))):
            ax = axes[row][col]
            ax.plot(t, real[index, :, k], "k", lw=2.5, label="real (recorded)")
            for method, ro in rollouts.items():
                ax.plot(t, getattr(ro, key)[index, :, k], lw=1.2, label=method)
            ax.set_title(f"{key}[{k}]")
            ax.set_xlabel("time since replay start [s]")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_closed_loop(summary: dict[str, Any], path: Path) -> Path:
    """Per training simulator: success and the task's error in that simulator and on the real robot (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(summary["methods"])
    rows = summary["methods"]
    panels = [(key, label) for key, label in (("success_rate", "success rate"),
                                              ("metric", "task error (episodes that did not fail)"),
                                              ("failure_rate", "failed (crash, fall)"))
              if any(r["real"].get(key) is not None for r in rows.values())]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    x = np.arange(len(methods))

    def value(row: dict[str, Any], key: str) -> float:
        return float("nan") if row.get(key) is None else float(row[key])

    for ax, (key, label) in zip(axes[0], panels, strict=True):
        for offset, where, color in ((-0.2, "sim", "tab:gray"), (0.2, "real", "tab:blue")):
            ax.bar(x + offset, [value(rows[m].get(where, {}), key) for m in methods], width=0.4,
                   color=color, label="in its own simulator" if where == "sim" else "on the real robot")
        ax.set_xticks(x, methods, rotation=20)
        ax.set_ylabel(label)
        ax.set_ylim(0.0, 1.05 if key != "metric" else None)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"closed loop: {summary['robot']} on {summary['real_env']}, trained in each simulator")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
