"""PNG plots of an episode: state and action curves (interventions shaded) and a contact sheet of frames.

Figures are built with matplotlib's object API (``Figure``, rendered by Agg), never pyplot, so plotting
works headless and leaves the caller's global backend alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from robot_rl.data.store import EpisodeStore


def plot_episode(store: EpisodeStore, index: int, out: str | Path) -> Path:
    """State fields, action and reward of episode ``index`` against time; steps under human control shaded."""
    assert store.schema is not None
    info = store.episode_info(index)
    keys = store.schema.state_keys
    cols = store.read_episode(index, [f"observation.{k}" for k in keys] +
                              ["action", "reward", "is_intervention", "obs_stamp"])
    t = cols["obs_stamp"] - cols["obs_stamp"][0]
    rows = len(keys) + 2
    fig = Figure(figsize=(9, 1.9 * rows), layout="constrained")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)
    panels = [(f"observation.{k}", k) for k in keys] + [("action", "action"), ("reward", "reward")]
    human = cols["is_intervention"]
    for ax, (col, title) in zip(axes[:, 0], panels):
        values = cols[col].reshape(len(t), -1)
        lines = ax.plot(t, values, linewidth=1.0)
        if 1 < values.shape[1] <= 12:
            ax.legend(lines, [str(i) for i in range(values.shape[1])], fontsize=6, ncol=values.shape[1],
                      loc="upper right", frameon=False)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(alpha=0.3)
        for start, stop in _runs(human):
            ax.axvspan(t[start], t[min(stop, len(t) - 1)], color="tab:orange", alpha=0.15, linewidth=0)
    axes[-1, 0].set_xlabel("time [s]")
    outcome = {True: "success", False: "failure", None: "outcome unknown"}[info.success]
    fig.suptitle(f"episode {index} (id {info.episode_id}): {info.task!r}, {info.length} steps, {outcome}"
                 + (", human control shaded" if human.any() else ""), fontsize=10)
    return _save(fig, out)


def contact_sheet(store: EpisodeStore, index: int, out: str | Path, frames: int = 8) -> Path | None:
    """``frames`` evenly spaced camera frames of episode ``index``, one row per camera; None without cameras."""
    assert store.schema is not None
    cams = store.schema.image_keys
    if not cams:
        return None
    start, stop = store.bounds(index)
    steps = np.unique(np.linspace(0, stop - start - 1, num=min(frames, stop - start)).round().astype(int))
    fig = Figure(figsize=(1.6 * len(steps), 1.7 * len(cams)), layout="constrained")
    axes = fig.subplots(len(cams), len(steps), squeeze=False)
    for r, cam in enumerate(cams):
        arr = store.array(f"observation.{cam}")
        for c, step in enumerate(steps):
            ax = axes[r, c]
            ax.imshow(arr[start + int(step)])
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"step {step}", fontsize=8)
            if c == 0:
                ax.set_ylabel(cam, fontsize=8)
    fig.suptitle(f"episode {index}: {store.episode_info(index).task!r}", fontsize=9)
    return _save(fig, out)


def _save(fig: Figure, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    padded = np.concatenate([[False], np.asarray(mask, bool), [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))
