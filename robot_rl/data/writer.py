"""Writing one episode into an :class:`~robot_rl.data.store.EpisodeStore`: checks, buffering, commit.

Steps are checked (schema, consecutive steps, episode id) before anything is written, buffered, and
every ``flush_frames`` steps handed to a writer thread that appends them past the committed rows; the
episode becomes visible only when :meth:`EpisodeWriter.commit` writes its ``meta/episode_ends`` row.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Protocol

import numpy as np

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.data.schema import EPISODE_COLUMNS, SEGMENT_SOURCES, DatasetError, StepSchema


class WritableStore(Protocol):
    """What a writer uses of :class:`robot_rl.data.store.EpisodeStore` (which imports this module)."""

    path: Any
    schema: StepSchema | None
    tasks: list[str]
    _root: Any
    _ends: np.ndarray
    _writer: EpisodeWriter | None

    @property
    def num_episodes(self) -> int:
        """Committed episodes."""

    @property
    def num_frames(self) -> int:
        """Committed frames."""

    def _init_schema(self, schema: StepSchema) -> None: ...

    def _get(self, group: str, name: str) -> Any: ...

    def _drop_uncommitted(self) -> None: ...


class EpisodeWriter:
    """Appends the steps of one episode; :meth:`commit` makes it visible, :meth:`discard` erases it.

    Used as a context manager it commits on normal exit and discards when an exception escapes.
    """

    def __init__(self, store: WritableStore, task: str, episode_id: int, flush_frames: int,
                 background: bool = True) -> None:
        if flush_frames < 1:
            raise ValueError(f"flush_frames: must be >= 1, got {flush_frames}")
        self.store, self.task, self.episode_id = store, task, episode_id
        self.index = store.num_episodes
        self._flush_frames = flush_frames
        self._start = store.num_frames
        self._written = 0
        self._buffer: dict[str, list[np.ndarray]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episode-writer") if background else None
        self._pending: Future[None] | None = None
        self._last: dict[str, np.ndarray] | None = None  # a copy of the last step's next_observation
        self.done = False

    @property
    def num_steps(self) -> int:
        """Steps added so far."""
        return self._written + len(next(iter(self._buffer.values()), []))

    def add(self, t: Transition) -> None:
        """Append one step; raises SpecError naming the episode and field on bad input (nothing is written)."""
        self._check_open()
        where = f"episode {self.index}"
        if not isinstance(t, Transition):
            raise SpecError(f"{where}: expected a Transition, got {type(t).__name__}")
        if self.store.schema is None:
            self.store._init_schema(StepSchema.from_observation(t.observation, t.action))
        schema = self.store.schema
        assert schema is not None
        step = self.num_steps
        if t.step != step:
            raise SpecError(f"{where}, field step: expected {step}, got {t.step}")
        if t.episode_id != self.episode_id:
            raise SpecError(f"{where}, field episode_id: expected {self.episode_id}, got {t.episode_id}")
        with _prefixed(f"{where}, step {step}, field "):
            _check_obs(schema, t.observation, "observation.")
            _check_obs(schema, t.next_observation, "next_observation.")
            for name in ("action", "policy_action", "base_action"):
                value = getattr(t, name)
                if value is not None and value.shape != (schema.action_dim,):
                    raise SpecError(f"{name}: expected shape ({schema.action_dim},), got {value.shape}")
        if self._last is not None:
            for k, v in t.observation.items():
                if not np.array_equal(v, self._last[k]):
                    raise SpecError(f"{where}, step {step}, field observation.{k}: differs from the previous step's "
                                    "next_observation (steps of an episode must be consecutive)")
        nan_action = np.full(schema.action_dim, np.nan, dtype=np.float32)
        row: dict[str, Any] = {f"observation.{k}": v for k, v in t.observation.items()}
        row.update(action=t.action, policy_action=t.policy_action if t.policy_action is not None else nan_action,
                   base_action=t.base_action if t.base_action is not None else nan_action,
                   reward=t.reward, terminated=t.terminated, truncated=t.truncated,
                   is_intervention=t.is_intervention, segment_source=SEGMENT_SOURCES.index(t.segment_source.value),
                   segment_id=t.segment_id, policy_version=t.policy_version, obs_stamp=t.obs_stamp,
                   next_obs_stamp=t.next_obs_stamp)
        for name, value in row.items():  # copies: the caller may reuse its arrays before the flush
            self._buffer.setdefault(name, []).append(np.array(value, copy=True))
        self._last = {k: np.array(v, copy=True) for k, v in t.next_observation.items()}
        if len(self._buffer["action"]) >= self._flush_frames:
            try:
                self._flush()
            except OSError as exc:
                raise self._abandon(exc) from exc

    def commit(self, success: bool | None = None) -> int:
        """Make the episode part of the store (atomically); returns its index."""
        self._check_open()
        if self._last is None:
            raise DatasetError(f"episode {self.index}: cannot commit an empty episode")
        try:
            return self._commit(success)
        except OSError as exc:
            raise self._abandon(exc) from exc

    def _commit(self, success: bool | None) -> int:
        assert self._last is not None
        self._flush(wait=True)
        store = self.store
        schema = store.schema
        assert schema is not None
        if self.task not in store.tasks:
            store.tasks.append(self.task)
            store._root.attrs["tasks"] = store.tasks
        for k in schema.observation:
            _append(store._get("meta", f"final_observation.{k}"), self.index,
                    self._last[k][None])
        values = {"episode_id": self.episode_id, "task_index": store.tasks.index(self.task),
                  "success": -1 if success is None else int(bool(success))}
        for name, value in values.items():
            _append(store._get("meta", name), self.index, np.asarray([value], dtype=EPISODE_COLUMNS[name]))
        end = self._start + self._written
        _append(store._get("meta", "episode_ends"), self.index, np.asarray([end], dtype=np.int64))  # the commit point
        store._ends = np.append(store._ends, end)
        self._finish()
        return self.index

    def discard(self) -> None:
        """Drop every step of this episode from disk (re-record, e-stop, operator abort)."""
        if self.done:
            return
        self._buffer.clear()
        with contextlib.suppress(Exception):  # a failed write in flight changes nothing: all is erased
            self._wait()
        self.store._drop_uncommitted()
        self._finish()

    def _abandon(self, exc: OSError) -> OSError:
        """A write failed (disk full, I/O error): erase the take as far as the disk allows, close this writer.

        The store then records again once the cause is gone; returns the one-line error to raise.
        """
        self._buffer.clear()
        with contextlib.suppress(Exception):  # on a full disk even truncating may fail: readers ignore the rows
            self._wait()
        with contextlib.suppress(Exception):
            self.store._drop_uncommitted()
        self._finish()
        why = "No space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc).splitlines()[0])
        return OSError(exc.errno, f"{self.store.path}: episode {self.index} not recorded: {why} (the take was "
                                  "discarded; committed episodes are unchanged)")

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.discard()
        elif not self.done:
            self.commit()

    def _check_open(self) -> None:
        if self.done:
            raise DatasetError(f"episode {self.index}: already committed or discarded")

    def _finish(self) -> None:
        self.done = True
        self.store._writer = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _flush(self, wait: bool = False) -> None:
        """Hand the buffered steps to the writer thread (at most one batch in flight), or write them now."""
        self._wait()
        if not self._buffer or not self._buffer["action"]:
            return
        row = self._start + self._written
        batch, self._buffer = self._buffer, {}
        self._written += len(batch["action"])
        if self._pool is None or wait:
            self._write(row, batch)
        else:
            self._pending = self._pool.submit(self._write, row, batch)

    def _write(self, row: int, batch: dict[str, list[np.ndarray]]) -> None:
        for name, values in batch.items():
            _append(self.store._get("data", name), row, np.stack(values))

    def _wait(self) -> None:
        """Block until the batch in flight is on disk; re-raises its error."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()


def _append(arr: Any, row: int, values: np.ndarray) -> None:
    """Write ``values`` at ``row`` (growing the array); earlier rows are left as they are."""
    arr.resize((row + len(values), *arr.shape[1:]))
    arr[row: row + len(values)] = values


def _check_obs(schema: StepSchema, obs: Any, prefix: str) -> None:
    if set(obs) != set(schema.observation):
        raise SpecError(f"{prefix.rstrip('.')}: keys {sorted(obs)} differ from the store's "
                        f"{sorted(schema.observation)}")
    for k, spec in schema.observation.items():
        v = obs[k]
        if v.shape != spec.shape or v.dtype != spec.np_dtype:
            raise SpecError(f"{prefix}{k}: expected {spec.shape}/{spec.dtype}, got {v.shape}/{v.dtype.name}")


@contextlib.contextmanager
def _prefixed(prefix: str) -> Iterator[None]:
    try:
        yield
    except SpecError as exc:
        raise SpecError(prefix + str(exc)) from None
