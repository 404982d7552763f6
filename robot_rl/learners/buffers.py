"""Replay buffers on the Transition record: a ring of columns, RLPD 50/50 batches, append-only saves.

Why not LeRobot's HIL-SERL ``ReplayBuffer`` (``lerobot/rl/buffer.py``): it stores every field as float32
tensors, its ``optimize_memory`` mode reads ``next_state`` from the following row, and it persists by
converting the whole buffer into a dataset. Here images stay uint8, ``next_observation`` is stored (a
truncated step never bootstraps from the next episode's reset frame), and :meth:`save` only writes the
rows added since the previous save as a new safetensors chunk, so a checkpoint does not rewrite the whole
buffer. A manifest written last (atomically) lists the chunks, so a learner killed during a save
restarts from the previous complete state. No pickle anywhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import OPTIONAL, SCALARS, columns_to_transitions, transitions_to_columns

MANIFEST = "buffer.json"
FORMAT = "robot_rl.replay_buffer"
class ColumnRing:
    """Fixed-capacity FIFO of named columns (rows of any shape and dtype); the layout comes from the first rows.

    The storage of :class:`ReplayBuffer`; ``robot-rl rl train``'s SAC (robot_rl.rl.sac) keeps its flat
    vector-env steps in one directly.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity: must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.columns: dict[str, np.ndarray] = {}
        self.total_added = 0
        """Rows ever added (the next one gets global index ``total_added``)."""

    def __len__(self) -> int:
        return min(self.total_added, self.capacity)

    @property
    def layout(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Column name -> (per-row shape, dtype name)."""
        return {k: (v.shape[1:], v.dtype.name) for k, v in self.columns.items()}

    def append_columns(self, cols: dict[str, np.ndarray]) -> None:
        """Append rows given as columns of one length (the oldest rows are dropped when full).

        Every call must give the same columns with the same per-row shapes and dtypes.
        """
        n = len(next(iter(cols.values())))
        if not self.columns:
            self.columns = {k: np.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in cols.items()}
        if set(cols) != set(self.columns):
            raise SpecError(f"transition: fields {sorted(set(cols) ^ set(self.columns))} differ from the buffer's")
        for key, value in cols.items():
            want = self.columns[key]
            if value.shape[1:] != want.shape[1:] or value.dtype != want.dtype:
                raise SpecError(f"{key}: shape/dtype {value.shape[1:]}/{value.dtype.name} differ from the buffer's "
                                f"{want.shape[1:]}/{want.dtype.name}")
        if n > self.capacity:
            cols = {k: v[-self.capacity:] for k, v in cols.items()}
            self.total_added += n - self.capacity
            n = self.capacity
        pos = (self.total_added + np.arange(n)) % self.capacity
        for key, value in cols.items():
            self.columns[key][pos] = value
        self.total_added += n

    def rows(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Columns at storage positions ``indices`` (copies)."""
        return {k: v[indices] for k, v in self.columns.items()}

    def sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` uniformly random storage positions."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty buffer")
        return rng.integers(0, len(self), size=n)


class ReplayBuffer(ColumnRing):
    """A :class:`ColumnRing` of transitions (:func:`transitions_to_columns`), with RLPD batches and saves."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.balance_tasks = False
        """Sample every task equally (a fleet's learner sets it when ``fleet.tasks`` names several)."""
        self._task_rows: tuple[int, list[np.ndarray]] | None = None
        """(total_added when computed, storage positions of each task): kept until rows are added, so the many
        batches drawn between two receives do not each scan the whole buffer."""
        self._saved_upto = 0

    def add(self, transition: Transition) -> None:
        """Append one transition (the oldest is dropped when full)."""
        self.extend([transition])

    def extend(self, transitions: Sequence[Transition]) -> None:
        """Append transitions; all must share the buffer's observation fields, shapes and dtypes."""
        if transitions:
            self.append_columns(transitions_to_columns(transitions))

    def append_columns(self, cols: dict[str, np.ndarray]) -> None:
        """Append transition columns; ones written before an :data:`OPTIONAL` column existed get zeros."""
        n = len(cols["action"])
        for name in OPTIONAL - set(cols):  # written before the column existed
            cols = {**cols, name: np.zeros(n, dtype=SCALARS[name])}
        super().append_columns(cols)

    def sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` random storage positions: uniform, or the same share from every task when :attr:`balance_tasks`.

        Balanced batches keep a fleet's rare task (one robot among many simulators) from vanishing in them.
        """
        if not self.balance_tasks:
            return super().sample_indices(n, rng)
        if len(self) == 0:
            raise ValueError("cannot sample from an empty buffer")
        if self._task_rows is None or self._task_rows[0] != self.total_added:  # new rows since the last batch
            task = self.columns["task"][: len(self)]
            self._task_rows = (self.total_added, [np.flatnonzero(task == k) for k in np.unique(task)])
        groups = self._task_rows[1]
        share = np.diff(np.linspace(0, n, len(groups) + 1).round().astype(int))
        rng.shuffle(share)  # which task gets the extra row of an uneven split varies
        return np.concatenate([g[rng.integers(0, len(g), size=m)] for g, m in zip(groups, share, strict=True)])

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """A uniformly random batch of ``n`` rows, plus ``next_base_action``.

        ``next_base_action`` is the base policy's action at ``next_observation`` (a residual actor's target
        needs it): the following row's ``base_action`` when that row is the next step of the same episode,
        else this row's own (episode end or the next step not stored yet).
        """
        idx = self.sample_indices(n, rng)
        batch = self.rows(idx)
        nxt = (idx + 1) % self.capacity
        follows = ((self.total_added - 1) % self.capacity != idx) & (len(self) > 1)
        follows &= (self.columns["episode_id"][nxt] == batch["episode_id"])
        follows &= (self.columns["step"][nxt] == batch["step"] + 1)
        batch["next_base_action"] = np.where(follows[:, None], self.columns["base_action"][nxt], batch["base_action"])
        return batch

    def transitions(self) -> list[Transition]:
        """Every stored transition, oldest first."""
        if len(self) == 0:
            return []
        order = (self.total_added - len(self) + np.arange(len(self))) % self.capacity
        return columns_to_transitions(self.rows(order))

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the rows added since the last save as a new chunk, then the manifest (atomically).

        Chunks holding only rows that have since left the ring are deleted after the manifest is written.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        manifest = _read_manifest(folder) if (folder / MANIFEST).is_file() else {"chunks": []}
        if int(manifest.get("total_added", 0)) != self._saved_upto:
            raise ValueError(f"{folder}: holds another buffer's saves ({manifest.get('total_added')} rows; this buffer "
                             f"saved {self._saved_upto} there); load it with ReplayBuffer.load or use a new folder")
        chunks: list[list[int]] = [list(c) for c in manifest["chunks"]]
        first_kept = self.total_added - len(self)
        start = max(self._saved_upto, first_kept)
        if self.total_added > start:
            pos = np.arange(start, self.total_added) % self.capacity
            name = f"chunk_{start:012d}.safetensors"
            tmp = folder / f".{name}.tmp"
            save_file(self.rows(pos), str(tmp))
            os.replace(tmp, folder / name)
            chunks.append([start, self.total_added])
        kept = [c for c in chunks if c[1] > first_kept]
        _write_json(folder / MANIFEST, {"format": FORMAT, "capacity": self.capacity, "total_added": self.total_added,
                                        "chunks": kept})
        for begin, _ in chunks:
            if [begin, _] not in kept:
                (folder / f"chunk_{begin:012d}.safetensors").unlink(missing_ok=True)
        self._saved_upto = self.total_added
        return folder

    @classmethod
    def load(cls, folder: str | Path, capacity: int | None = None) -> ReplayBuffer:
        """Rebuild a buffer from :meth:`save` output (same counts; ``capacity`` defaults to the saved one)."""
        folder = Path(folder)
        manifest = _read_manifest(folder)
        buf = cls(int(capacity or manifest["capacity"]))
        total = int(manifest["total_added"])
        for begin, end in manifest["chunks"]:
            file = folder / f"chunk_{int(begin):012d}.safetensors"
            if not file.is_file():
                raise FileNotFoundError(f"{folder}: chunk {file.name} listed in {MANIFEST} is missing")
            cols = load_file(str(file))
            if len(cols.get("action", ())) != end - begin:
                raise SpecError(f"{file}: holds {len(cols.get('action', ()))} rows, the manifest says {end - begin}")
            buf.total_added = int(begin)  # places rows at their original ring positions
            buf.append_columns(cols)
        buf.total_added = total
        buf._saved_upto = total
        return buf


def truncate_saved(folder: str | Path, upto: int) -> int:
    """Cut a saved buffer back to its first ``upto`` rows (what a checkpoint's commit names); returns rows cut.

    A learner killed after saving its buffers but before committing the checkpoint left rows that the
    commit does not cover; actors re-send those, so they must go or they would be stored twice. A missing
    folder becomes an empty saved buffer.
    """
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / MANIFEST, {"format": FORMAT, "capacity": 1, "total_added": 0, "chunks": []})
        return 0
    manifest = _read_manifest(folder)
    total = int(manifest["total_added"])
    if upto >= total:
        return 0
    kept: list[list[int]] = []
    for begin, end in manifest["chunks"]:
        file = folder / f"chunk_{int(begin):012d}.safetensors"
        if begin >= upto:
            file.unlink(missing_ok=True)
            continue
        if end > upto:  # rewrite the chunk that straddles the mark with its first rows only
            cols = load_file(str(file))
            tmp = folder / f".{file.name}.tmp"
            save_file({k: np.ascontiguousarray(v[: upto - begin]) for k, v in cols.items()}, str(tmp))
            os.replace(tmp, file)
            end = upto
        kept.append([int(begin), int(end)])
    _write_json(folder / MANIFEST, {**manifest, "total_added": int(upto), "chunks": kept})
    return total - upto


def _read_manifest(folder: Path) -> dict[str, Any]:
    file = folder / MANIFEST
    if not file.is_file():
        raise FileNotFoundError(f"{folder}: no {MANIFEST} (not a saved replay buffer)")
    data = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecError(f"{file}: 'format' must be {FORMAT!r}")
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def route(transitions: Iterable[Transition], online: ReplayBuffer, demo: ReplayBuffer) -> None:
    """RLPD / HIL-SERL routing: every step goes online; human intervention steps ALSO go to ``demo``."""
    items = list(transitions)
    online.extend(items)
    demo.extend([t for t in items if t.is_intervention])


def mixed_sample(online: ReplayBuffer, demo: ReplayBuffer, batch_size: int, demo_fraction: float,
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A batch with ``round(batch_size * demo_fraction)`` demo rows and the rest online (RLPD symmetric sampling).

    When one buffer is empty the whole batch comes from the other. A ``from_demo`` column marks the rows.
    """
    if not 0.0 <= demo_fraction <= 1.0:
        raise ValueError(f"demo_fraction: must be in [0, 1], got {demo_fraction}")
    n_demo = round(batch_size * demo_fraction)
    if len(demo) == 0:
        n_demo = 0
    elif len(online) == 0:
        n_demo = batch_size
    parts = []
    if n_demo:
        parts.append({**demo.sample(n_demo, rng), "from_demo": np.ones(n_demo, bool)})
    if batch_size - n_demo:
        parts.append({**online.sample(batch_size - n_demo, rng), "from_demo": np.zeros(batch_size - n_demo, bool)})
    if len(parts) == 1:
        return parts[0]
    if set(parts[0]) != set(parts[1]):
        raise SpecError("online and demo buffers hold different fields")
    return {k: np.concatenate([parts[0][k], parts[1][k]]) for k in parts[0]}
