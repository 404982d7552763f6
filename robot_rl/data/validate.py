"""Deep check of an episode store: reads every chunk and reports problems; never modifies anything.

The store is opened read-only. Problems (unreadable chunks, NaN/inf, impossible values) are *issues*;
things that are legal but worth knowing (an uncommitted partial episode left by a crash, stamps that
go backwards between episodes) are *warnings*. Every message names the episode and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robot_rl.data import zarr_compat as zc
from robot_rl.data.schema import EPISODE_COLUMNS, SEGMENT_SOURCES, DatasetError
from robot_rl.data.store import EpisodeStore


@dataclass
class ValidationReport:
    """Result of :func:`validate_store`."""

    path: str
    """The store checked."""
    episodes: int = 0
    """Committed episodes found."""
    frames: int = 0
    """Committed steps found."""
    issues: list[str] = field(default_factory=list)
    """Errors: the data is wrong or unreadable."""
    warnings: list[str] = field(default_factory=list)
    """Legal but notable conditions."""

    @property
    def ok(self) -> bool:
        """No issues (warnings allowed)."""
        return not self.issues

    def lines(self) -> list[str]:
        """The report as printed: one line per issue and warning, then the verdict."""
        verdict = "OK" if self.ok else f"{len(self.issues)} issue(s)"
        return [*(f"ISSUE   {i}" for i in self.issues), *(f"WARNING {w}" for w in self.warnings),
                f"{verdict}: {self.episodes} episode(s), {self.frames} frame(s) checked in {self.path}"]


def validate_store(path: str | Path, progress: bool = False) -> ValidationReport:
    """Check structure, then every episode's columns, meta rows and final observation."""
    report = ValidationReport(path=str(path))
    try:
        store = EpisodeStore.open(path, mode="r")
    except DatasetError as exc:
        report.issues.append(str(exc))
        return report
    report.episodes, report.frames = store.num_episodes, store.num_frames
    if store.uncommitted_frames:
        report.warnings.append(f"episode {store.num_episodes}: incomplete, {store.uncommitted_frames} uncommitted "
                               "frame(s) (a crashed or aborted recording); dropped at the next append")
    if store.every_chunk_written:
        report.issues += _missing_chunks(store)
    else:
        report.warnings.append("missing chunk files cannot be told from all-zero chunks in this store "
                               "(written by an older version); they would read as zeros")
    for index in tqdm(range(store.num_episodes), desc="validate", unit="episode", disable=not progress):
        try:
            report.issues += _check_episode(store, index)
        except DatasetError as exc:
            report.issues.append(str(exc))
    return report


def _missing_chunks(store: EpisodeStore) -> list[str]:
    """Chunk files absent from disk (zarr would silently read them as zeros); every chunk is always written."""
    issues = []
    schema = store.schema
    columns = [("data", c, store.num_frames) for c in (schema.columns() if schema else {})]
    finals = [f"final_observation.{k}" for k in (schema.observation if schema else {})]
    columns += [("meta", c, store.num_episodes) for c in ("episode_ends", *EPISODE_COLUMNS, *finals)]
    for group, name, rows in columns:
        arr = store._get(group, name)
        step = arr.chunks[0]
        for chunk in range(-(-rows // step)):
            if not zc.chunk_file(store.path / group / name, chunk, arr.ndim).is_file():
                first = chunk * step
                owner = f"episode {store._episode_at_row(first)}" if group == "data" else f"episode {first}"
                issues.append(f"{owner}, field {group}/{name}: chunk file {chunk} (rows {first}..."
                              f"{min(first + step, rows) - 1}) is missing")
    return issues


def _check_episode(store: EpisodeStore, index: int) -> list[str]:
    issues: list[str] = []
    where = f"episode {index}"
    info = store.episode_info(index)
    cols = store.read_episode(index)
    store.final_observation(index)
    for name, values in cols.items():
        if values.dtype.kind != "f":
            continue
        if name in ("policy_action", "base_action"):
            rows = np.isnan(values)
            partial = rows.any(axis=1) & ~rows.all(axis=1)
            bad = partial | np.isinf(values).any(axis=1)
        else:
            bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if bad.any():
            issues.append(f"{where}, field {name}: non-finite values at step(s) {np.flatnonzero(bad)[:5].tolist()}")
    src = cols["segment_source"]
    if np.any(src >= len(SEGMENT_SOURCES)):
        unknown = sorted(set(src[src >= len(SEGMENT_SOURCES)].tolist()))
        issues.append(f"{where}, field segment_source: unknown value(s) {unknown}")
    human = SEGMENT_SOURCES.index("human")
    wrong = cols["is_intervention"] & (src != human)
    if wrong.any():
        issues.append(f"{where}, field segment_source: intervention steps {np.flatnonzero(wrong)[:5].tolist()} "
                      "are not marked 'human'")
    if np.any(cols["next_obs_stamp"] < cols["obs_stamp"]):
        issues.append(f"{where}, field next_obs_stamp: earlier than obs_stamp")
    if np.any(np.diff(cols["obs_stamp"]) < 0):
        issues.append(f"{where}, field obs_stamp: goes backwards within the episode")
    ends = cols["terminated"][:-1] | cols["truncated"][:-1]
    if ends.any():
        issues.append(f"{where}, field terminated/truncated: set before the last step (at {np.flatnonzero(ends)[:5]})")
    if info.length == 0:
        issues.append(f"{where}: empty")
    return issues
