"""Crash-safe episode store: one zarr store, episodes appended, earlier episodes never rewritten.

Layout (zarr format 2, see :mod:`robot_rl.data.zarr_compat`)::

    store.zarr/.zattrs                       format, DatasetInfo, StepSchema, task list
    store.zarr/data/<column>                 one row per step, time-major (see robot_rl.data.schema)
    store.zarr/meta/episode_ends             end row (exclusive) of each committed episode
    store.zarr/meta/{episode_id,task_index,success}
    store.zarr/meta/final_observation.<key>  the last next_observation of each episode

Commit protocol: a writer appends its steps to ``data/`` as it goes (bounded memory), then writes the
per-episode rows and finally one more row of ``meta/episode_ends``. Rows past ``episode_ends[-1]`` are
an uncommitted (incomplete) episode: readers ignore them, ``validate`` reports them, and opening for
append truncates them (chunks deleted, the shared tail chunk zeroed), so a killed writer or a discarded
take leaves no frames behind. Every file write is atomic (temporary file + rename), so a SIGKILL at any
moment leaves each array either before or after a write, never half-written. Image chunks hold one
frame each, so appending never touches an earlier episode's images; the one low-dim chunk (256 rows)
shared with the previous episode's tail is replaced atomically, its earlier rows unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

import robot_rl.data.zarr_compat as zc
from robot_rl.core.config import config_to_dict, load_config
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.schema import (
    EPISODE_COLUMNS,
    FORMAT_NAME,
    FORMAT_VERSION,
    SEGMENT_SOURCES,
    DatasetError,
    DatasetInfo,
    StepSchema,
)
from robot_rl.data.writer import EpisodeWriter

LOWDIM_CHUNK = 256
LOCK_NAME = ".writer.lock"


@dataclass(frozen=True)
class EpisodeInfo:
    """Summary of one committed episode."""

    index: int
    """Position in the store (0-based)."""
    episode_id: int
    """Id given by the recorder (Transition.episode_id)."""
    task: str
    """Task text."""
    success: bool | None
    """Whether the episode succeeded; None when unknown."""
    start: int
    """First row in ``data/``."""
    length: int
    """Number of steps."""


class EpisodeStore:
    """An episode store opened for reading (mode "r") or appending (mode "a")."""

    def __init__(self, path: Path, root: Any, writable: bool, lock: IO[bytes] | None) -> None:
        self.path = path
        self._root = root
        self._writable = writable
        self._lock = lock
        self._writer: EpisodeWriter | None = None
        self._arrays: dict[str, Any] = {}  # "data/x" / "meta/y" -> opened array (metadata read once)
        attrs = dict(root.attrs)
        if attrs.get("format") != FORMAT_NAME:
            raise DatasetError(f"{path}: not a robot_rl episode store (attribute 'format' is {attrs.get('format')!r})")
        version = attrs.get("version", -1)
        if isinstance(version, bool) or not isinstance(version, int):
            raise DatasetError(f"{path}: attribute 'version' must be an integer, got {version!r}")
        if version > FORMAT_VERSION:
            raise DatasetError(f"{path}: store version {version} is newer than this code ({FORMAT_VERSION})")
        try:
            self.info = load_config(DatasetInfo, attrs["info"])
        except (KeyError, ValueError) as exc:
            raise DatasetError(f"{path}: attribute 'info' is missing or malformed ({exc})") from exc
        if not isinstance(attrs.get("tasks", []), list):
            raise DatasetError(f"{path}: attribute 'tasks' must be a list, got {type(attrs['tasks']).__name__}")
        self.tasks: list[str] = [str(t) for t in attrs.get("tasks", [])]
        # Chunks equal to the fill value are on disk too, so a missing chunk file means damage.
        self.every_chunk_written = bool(attrs.get("every_chunk_written", False))
        try:
            self.schema: StepSchema | None = StepSchema.from_json(attrs["schema"]) if attrs.get("schema") else None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # DatasetError is a ValueError
            raise DatasetError(f"{path}: attribute 'schema' is malformed ({exc})") from exc
        self._ends = self._read_meta("episode_ends", required=True)
        if np.any(np.diff(np.concatenate([[0], self._ends])) <= 0):
            raise DatasetError(f"{path}: field meta/episode_ends is not strictly increasing: {self._ends.tolist()}")
        self.uncommitted_frames = self._check_structure()
        self.dropped_frames = 0
        if writable:
            self.dropped_frames = self.uncommitted_frames
            self._drop_uncommitted()

    # ----------------------------------------------------------------------------------- open / create
    @classmethod
    def create(cls, path: str | Path, info: DatasetInfo, schema: StepSchema | None = None) -> EpisodeStore:
        """Create a new, empty store at ``path`` (which must not exist) and open it for appending."""
        path = Path(path)
        if path.exists():
            raise DatasetError(f"{path}: already exists; open it with mode='a' to append")
        root = zc.open_group(path, mode="w-")
        meta = root.require_group("meta")
        root.require_group("data")
        zc.create_array(meta, "episode_ends", (0,), (LOWDIM_CHUNK,), np.dtype(np.int64), zc.lowdim_compressor())
        for name, dtype in EPISODE_COLUMNS.items():
            zc.create_array(meta, name, (0,), (LOWDIM_CHUNK,), dtype, zc.lowdim_compressor())
        root.attrs.update({"format": FORMAT_NAME, "version": FORMAT_VERSION, "info": config_to_dict(info),
                           "tasks": [], "schema": None, "every_chunk_written": True})
        store = cls.open(path, mode="a")
        if schema is not None:
            store._init_schema(schema)
        return store

    @classmethod
    def open(cls, path: str | Path, mode: str = "r") -> EpisodeStore:
        """Open an existing store: "r" reads only; "a" appends and drops an uncommitted episode."""
        path = Path(path)
        if mode not in ("r", "a"):
            raise ValueError(f"mode: expected 'r' or 'a', got {mode!r}")
        if not (path / ".zgroup").is_file():
            raise DatasetError(f"{path}: no episode store here (missing .zgroup)")
        lock = _acquire_lock(path) if mode == "a" else None
        try:
            try:
                root = zc.open_group(path, mode="r" if mode == "r" else "r+")
            except Exception as exc:
                raise DatasetError(f"{path}: cannot open the store ({type(exc).__name__}: {exc})") from exc
            return cls(path, root, writable=mode == "a", lock=lock)
        except Exception:
            if lock is not None:
                lock.close()
            raise

    def close(self) -> None:
        """Release the writer lock; an episode still being written is discarded."""
        if self._writer is not None:
            self._writer.discard()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        self._writable = False

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ----------------------------------------------------------------------------------- reading
    @property
    def num_episodes(self) -> int:
        """Committed episodes."""
        return int(self._ends.size)

    @property
    def num_frames(self) -> int:
        """Committed steps over all episodes."""
        return int(self._ends[-1]) if self._ends.size else 0

    @property
    def episode_ends(self) -> np.ndarray:
        """End row (exclusive) of each committed episode."""
        return self._ends.copy()

    def bounds(self, index: int) -> tuple[int, int]:
        """Rows [start, stop) of episode ``index``."""
        if not 0 <= index < self.num_episodes:
            raise DatasetError(f"episode {index}: out of range, the store has {self.num_episodes} episode(s)")
        return (int(self._ends[index - 1]) if index else 0), int(self._ends[index])

    def episode_info(self, index: int) -> EpisodeInfo:
        """Id, task, success and extent of episode ``index``."""
        start, stop = self.bounds(index)
        meta = {name: self._meta_value(name, index) for name in EPISODE_COLUMNS}
        task_index = int(meta["task_index"])
        if not 0 <= task_index < len(self.tasks):
            raise DatasetError(f"{self.path}: episode {index}, field meta/task_index: {task_index} "
                               "is not a known task")
        success = None if int(meta["success"]) < 0 else bool(meta["success"])
        return EpisodeInfo(index, int(meta["episode_id"]), self.tasks[task_index], success, start, stop - start)

    def column_names(self) -> list[str]:
        """Every per-step column name (empty before the first step was written)."""
        return list(self.schema.columns()) if self.schema else []

    def array(self, column: str) -> Any:
        """The raw zarr array of a per-step column (rows past :attr:`num_frames` are uncommitted)."""
        return self._get("data", column)

    def read_episode(self, index: int, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Columns of episode ``index`` as arrays with a leading time axis."""
        start, stop = self.bounds(index)
        out = {}
        for name in columns if columns is not None else self.column_names():
            out[name] = self._read(index, name, lambda n=name: self.array(n)[start:stop])
        return out

    def final_observation(self, index: int) -> dict[str, np.ndarray]:
        """The ``next_observation`` of the last step of episode ``index``."""
        self.bounds(index)
        assert self.schema is not None
        return {k: self._read(index, f"meta/final_observation.{k}",
                              lambda k=k: self._get("meta", f"final_observation.{k}")[index])
                for k in self.schema.observation}

    def transitions(self, index: int) -> Iterator[Transition]:
        """Rebuild the Transition records of episode ``index`` (exactly what was written)."""
        cols = self.read_episode(index)
        final = self.final_observation(index)
        info = self.episode_info(index)
        assert self.schema is not None
        keys = list(self.schema.observation)
        n = info.length
        for i in range(n):
            obs = {k: cols[f"observation.{k}"][i] for k in keys}
            nxt = final if i == n - 1 else {k: cols[f"observation.{k}"][i + 1] for k in keys}
            src = int(cols["segment_source"][i])
            if src >= len(SEGMENT_SOURCES):
                raise DatasetError(f"{self.path}: episode {index}, field segment_source: value {src} at step {i} "
                                   "is unknown")
            try:
                transition = Transition(
                    observation=obs, next_observation=nxt, action=cols["action"][i],
                    policy_action=_none_if_nan(cols["policy_action"][i]),
                    base_action=_none_if_nan(cols["base_action"][i]),
                    reward=float(cols["reward"][i]), terminated=bool(cols["terminated"][i]),
                    truncated=bool(cols["truncated"][i]), is_intervention=bool(cols["is_intervention"][i]),
                    segment_source=SegmentSource(SEGMENT_SOURCES[src]), segment_id=int(cols["segment_id"][i]),
                    episode_id=info.episode_id, step=i, policy_version=int(cols["policy_version"][i]),
                    obs_stamp=float(cols["obs_stamp"][i]), next_obs_stamp=float(cols["next_obs_stamp"][i]),
                )
            except SpecError as exc:  # damaged rows (a lost chunk reads as zeros) break a step's invariants
                raise DatasetError(f"{self.path}: episode {index}, step {i}: {exc}") from exc
            yield transition

    # ----------------------------------------------------------------------------------- writing
    def begin_episode(self, task: str | None = None, episode_id: int | None = None,
                      flush_frames: int = 32, background: bool = True) -> EpisodeWriter:
        """Start writing one episode; commit or discard it before starting the next.

        Every ``flush_frames`` steps the buffered steps go to disk; with ``background`` a writer thread
        does that while the caller keeps stepping (a control loop never waits for compression).
        """
        if not self._writable:
            raise DatasetError(f"{self.path}: opened read-only; open with mode='a' to record")
        if self._writer is not None:
            raise DatasetError(f"{self.path}: episode {self.num_episodes} is still being written")
        if episode_id is None:
            ids = self._get("meta", "episode_id")[: self.num_episodes]
            episode_id = int(ids.max()) + 1 if ids.size else 0
        self._writer = EpisodeWriter(self, task if task is not None else self.info.task, episode_id, flush_frames,
                                     background)
        return self._writer

    def add_episode(self, transitions: Iterable[Transition], task: str | None = None,
                    success: bool | None = None) -> int:
        """Write and commit a whole episode; returns its index."""
        with self.begin_episode(task=task) as writer:
            for t in transitions:
                writer.add(t)
            return writer.commit(success=success)

    def drop_last_episode(self) -> EpisodeInfo:
        """Erase the last committed episode (an operator's "delete that take"); returns what was dropped.

        The commit point goes first (``meta/episode_ends`` shrinks by one row, one atomic write), so a
        crash half-way leaves the episode as an uncommitted remainder that the next append clears.
        """
        if not self._writable:
            raise DatasetError(f"{self.path}: opened read-only; open with mode='a' to drop episodes")
        if self._writer is not None:
            raise DatasetError(f"{self.path}: episode {self.num_episodes} is still being written")
        if self.num_episodes == 0:
            raise DatasetError(f"{self.path}: no episode to drop")
        dropped = self.episode_info(self.num_episodes - 1)
        ends = self._get("meta", "episode_ends")
        ends.resize((self.num_episodes - 1,))
        self._ends = self._ends[:-1]
        self._drop_uncommitted()
        return dropped

    # ----------------------------------------------------------------------------------- internals
    def _init_schema(self, schema: StepSchema) -> None:
        data, meta = self._root["data"], self._root["meta"]
        for name, (shape, dtype) in schema.columns().items():
            image = len(shape) == 3 and dtype == np.uint8
            chunks = (1, *shape) if image else (LOWDIM_CHUNK, *shape)
            comp = zc.image_compressor() if image else zc.lowdim_compressor()
            zc.create_array(data, name, (0, *shape), chunks, dtype, comp)
            if name.startswith("observation."):
                key = name[len("observation."):]
                zc.create_array(meta, f"final_observation.{key}", (0, *shape),
                                (1, *shape) if image else (LOWDIM_CHUNK, *shape), dtype, comp)
        self._root.attrs["schema"] = schema.to_json()
        self.schema = schema

    def _read_meta(self, name: str, required: bool = False) -> np.ndarray:
        arr = self._get("meta", name)
        try:
            return np.asarray(arr[:])
        except Exception as exc:
            raise DatasetError(f"{self.path}: field meta/{name} cannot be read ({type(exc).__name__}: {exc})") from exc

    def _meta_value(self, name: str, index: int) -> Any:
        return self._read(index, f"meta/{name}", lambda: self._get("meta", name)[index])

    def _read(self, index: int, field: str, fn: Any) -> np.ndarray:
        try:
            return np.asarray(fn())
        except DatasetError:
            raise
        except Exception as exc:
            raise DatasetError(f"{self.path}: episode {index}, field {field}: cannot be read "
                               f"({type(exc).__name__}: {exc})") from exc

    def _episode_at_row(self, row: int) -> int:
        return int(np.searchsorted(self._ends, row, side="right"))

    def _check_structure(self) -> int:
        """Cheap checks on open; returns the number of uncommitted rows."""
        n_ep, n_rows = self.num_episodes, self.num_frames
        finals = [f"final_observation.{k}" for k in (self.schema.observation if self.schema else ())]
        for name in (*EPISODE_COLUMNS, *finals):
            length = self._meta_shape(name)[0]
            if length < n_ep:
                raise DatasetError(f"{self.path}: episode {length}, field meta/{name}: missing "
                                   f"(has {length} of {n_ep} rows)")
        if self.schema is None:
            if n_ep:
                raise DatasetError(f"{self.path}: {n_ep} episode(s) but no schema attribute")
            return 0
        longest = n_rows
        for name, (shape, _dtype) in self.schema.columns().items():
            arr = self.array(name)
            if tuple(arr.shape[1:]) != shape:
                raise DatasetError(f"{self.path}: field data/{name} has step shape {tuple(arr.shape[1:])}, "
                                   f"schema says {shape}")
            if arr.shape[0] < n_rows:
                ep = self._episode_at_row(arr.shape[0])
                raise DatasetError(f"{self.path}: episode {ep}, field data/{name}: truncated "
                                   f"({arr.shape[0]} of {n_rows} rows)")
            longest = max(longest, arr.shape[0])
        return longest - n_rows

    def _meta_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._get("meta", name).shape)

    def _get(self, group: str, name: str) -> Any:
        """An array of ``data/`` or ``meta/``, opened once."""
        key = f"{group}/{name}"
        if key not in self._arrays:
            try:
                arr = zc.get_array(self._root[group], name)
            except KeyError:
                raise DatasetError(f"{self.path}: field {key} is missing") from None
            except Exception as exc:  # unreadable .zarray and the like
                raise DatasetError(f"{self.path}: field {key} cannot be opened ({type(exc).__name__}: {exc})") from exc
            if not hasattr(arr, "shape"):  # a damaged .zarray can make zarr see a group there
                raise DatasetError(f"{self.path}: field {key} is not an array (damaged .zarray?)")
            self._arrays[key] = arr
        return self._arrays[key]

    def _drop_uncommitted(self) -> None:
        """Truncate rows past the last committed episode (crash leftovers, discarded takes)."""
        for part in self.path.rglob("*.partial"):
            part.unlink(missing_ok=True)
        for group, rows in (("data", self.num_frames), ("meta", self.num_episodes)):
            for name in zc.array_names(self._root[group]):
                _truncate(self._get(group, name), rows)


def _truncate(arr: Any, rows: int) -> None:
    """Shrink to ``rows``: later chunks are deleted and the shared tail chunk is zeroed past ``rows``."""
    if arr.shape[0] <= rows:
        return
    chunk = arr.chunks[0]
    tail_end = min(arr.shape[0], -(-rows // chunk) * chunk)
    if tail_end > rows:
        arr[rows:tail_end] = np.zeros((tail_end - rows, *arr.shape[1:]), dtype=arr.dtype)
    arr.resize((rows, *arr.shape[1:]))


def _none_if_nan(value: np.ndarray) -> np.ndarray | None:
    return None if np.all(np.isnan(value)) else np.asarray(value)


def _acquire_lock(path: Path) -> IO[bytes]:
    """Hold an exclusive lock on the store for this process (released on exit, even on SIGKILL)."""
    handle = open(path / LOCK_NAME, "ab")  # noqa: SIM115 - kept open while the store is open
    try:
        import fcntl

        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:  # pragma: no cover - not POSIX: no inter-process lock
        pass
    except OSError:
        handle.close()
        raise DatasetError(f"{path}: another process has it open for writing (pid lock {LOCK_NAME})") from None
    os.set_inheritable(handle.fileno(), False)
    return handle
