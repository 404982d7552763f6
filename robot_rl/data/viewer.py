"""Recorded episodes in rerun, the viewer LeRobot uses: one recording per episode, as rerun's own LeRobot loader does.

Each episode becomes a recording (the viewer lists them, named ``episode <i>``) with two timelines,
``step`` (the step index) and ``time`` (the episode's ``obs_stamp``: a duration from the episode's start,
or wall-clock time for stamps that are, see :mod:`robot_rl.data.viewer_episodes`). Entities:

    observation/<camera>        images (raw, or JPEG with ``jpeg_quality``)
    observation/<field>/<i>     one scalar series per element of a state field (``observation/<field>``
                                for one-element fields)
    action/<i>, policy_action/<i>, base_action/<i>   steps where no action was proposed (NaN) are left out
    reward, is_intervention (0/1), policy_version
    success                     one point at the last step, when the outcome is known
    episode                     a text panel: task, id, length, outcome

Data goes in column by column (``send_columns``), a block of frames at a time. rerun (``rerun-sdk``, the
extra ``robot_rl[viz]``) is imported only when a function here runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from tqdm import tqdm

from robot_rl.data.schema import ACTION_COLUMNS
from robot_rl.data.store import EpisodeStore
from robot_rl.data.viewer_episodes import check_quality, encode_jpeg, image_blocks, select_episodes, stamps_are_absolute

APPLICATION_ID = "robot_rl"
SCALARS = ("reward", "is_intervention", "policy_version")


def rerun_module() -> ModuleType:
    """``import rerun``, or an ImportError that names the extra to install."""
    try:
        import rerun
    except ImportError as exc:
        raise ImportError("rerun is not installed: pip install 'robot_rl[viz]' (or pip install rerun-sdk)") from exc
    return rerun


@dataclass
class ViewReport:
    """What :func:`view_store` sent."""

    episodes: list[int]
    """Store indices of the episodes, one recording each."""
    frames: int
    """Steps over those episodes."""
    rrd: Path | None
    """The recording file written, if any."""
    seconds: float
    """Wall-clock time taken."""


def time_indexes(rr: ModuleType, stamps: np.ndarray, steps: np.ndarray, absolute: bool) -> list[Any]:
    """The ``step`` and ``time`` timelines of the rows ``steps`` whose stamps are ``stamps``."""
    when = rr.TimeColumn("time", timestamp=stamps) if absolute else rr.TimeColumn("time", duration=stamps)
    return [rr.TimeColumn("step", sequence=steps), when]


def element_paths(path: str, size: int) -> list[str]:
    """Entity paths of the elements of a vector field: ``path/<i>``, or ``path`` for one element."""
    return [path] if size == 1 else [f"{path}/{i}" for i in range(size)]


def log_episode(rec: Any, store: EpisodeStore, index: int, jpeg_quality: int | None = None,
                bar: Any = None) -> int:
    """Send episode ``index`` of ``store`` to the recording ``rec``; returns its number of steps."""
    rr = rerun_module()
    schema = store.schema
    assert schema is not None
    info = store.episode_info(index)
    n = info.length
    cols = store.read_episode(index, [f"observation.{k}" for k in schema.state_keys]
                              + [*ACTION_COLUMNS, *SCALARS, "obs_stamp"])
    stamps = cols["obs_stamp"].astype(np.float64)
    absolute = stamps_are_absolute(stamps)
    if not absolute:
        stamps = stamps - stamps[0]
    steps = np.arange(n)
    every = time_indexes(rr, stamps, steps, absolute)

    def series(path: str, values: np.ndarray, rows: np.ndarray | None = None) -> None:
        values = values.reshape(len(values), -1).astype(np.float64)
        indexes = every if rows is None else time_indexes(rr, stamps[rows], steps[rows], absolute)
        for i, entity in enumerate(element_paths(path, values.shape[1])):
            rec.send_columns(entity, indexes=indexes, columns=rr.Scalars.columns(scalars=values[:, i]))

    for key in schema.state_keys:
        series(f"observation/{key}", cols[f"observation.{key}"])
    for name in ACTION_COLUMNS:
        proposed = np.isfinite(cols[name]).all(axis=1)  # NaN rows: no action proposed at that step
        if proposed.all():
            series(name, cols[name])
        elif proposed.any():
            series(name, cols[name][proposed], np.flatnonzero(proposed))
    for name in SCALARS:
        series(name, cols[name])
    if info.success is not None:
        series("success", np.array([float(info.success)]), np.array([n - 1]))
    outcome = {True: "success", False: "failure", None: "unknown"}[info.success]
    rec.log("episode", rr.TextDocument(
        f"**episode {index}** (id {info.episode_id}) of `{store.path.name}`\n\ntask: {info.task!r}\n\n"
        f"{n} steps at {store.info.fps:g} Hz, outcome: {outcome}, {int(cols['is_intervention'].sum())} human steps",
        media_type="text/markdown"), static=True)
    for key in schema.image_keys:
        _log_camera(rr, rec, store, index, key, stamps, absolute, jpeg_quality, bar)
    if bar is not None and not schema.image_keys:
        bar.update(n)
    return n


def _log_camera(rr: ModuleType, rec: Any, store: EpisodeStore, index: int, key: str, stamps: np.ndarray,
                absolute: bool, jpeg_quality: int | None, bar: Any) -> None:
    assert store.schema is not None
    h, w, c = store.schema.observation[key].shape
    entity = f"observation/{key}"
    if jpeg_quality is None:
        model = {1: "L", 3: "RGB", 4: "RGBA"}[c]
        rec.log(entity, rr.Image.from_fields(format=rr.components.ImageFormat(
            width=w, height=h, color_model=model, channel_datatype="U8")), static=True)
    for first, frames in image_blocks(store, index, key):
        rows = np.arange(first, first + len(frames))
        indexes = time_indexes(rr, stamps[rows], rows, absolute)
        if jpeg_quality is None:
            columns = rr.Image.columns(buffer=frames.reshape(len(frames), -1))
        else:
            columns = rr.EncodedImage.columns(blob=[encode_jpeg(f, jpeg_quality) for f in frames],
                                              media_type=["image/jpeg"] * len(frames))
        rec.send_columns(entity, indexes=indexes, columns=columns)
        if bar is not None and key == store.schema.image_keys[0]:
            bar.update(len(frames))


def view_store(store: EpisodeStore, episodes: Sequence[int] | None = None, rrd: str | Path | None = None,
               spawn: bool = False, jpeg_quality: int | None = None, progress: bool = True) -> ViewReport:
    """Show ``episodes`` (default: all) in a rerun viewer (``spawn``) and/or save them to the file ``rrd``.

    Each episode is its own recording; several go into one ``.rrd`` through rerun's ``rrd merge`` (a
    recording file holds one stream per writer, and streams cannot simply be concatenated).
    """
    rr = rerun_module()
    check_quality(jpeg_quality)
    if rrd is None and not spawn:
        raise ValueError("view_store: nothing to do (give rrd and/or spawn=True)")
    indices = select_episodes(store, episodes)
    t0 = time.perf_counter()
    out = Path(rrd) if rrd is not None else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    total = sum(store.episode_info(i).length for i in indices)
    with tempfile.TemporaryDirectory(prefix=".rerun-", dir=out.parent if out else None) as tmp:
        parts: list[Path] = []
        with tqdm(total=total, desc="rerun", unit="frame", disable=not progress) as bar:
            for i in indices:
                rec = rr.RecordingStream(APPLICATION_ID, recording_id=f"{store.path.stem}-{i}-{uuid.uuid4().hex[:8]}")
                if spawn and i == indices[0]:
                    spawn_viewer(rec)
                sinks: list[Any] = [rr.GrpcSink()] if spawn else []
                if out is not None:
                    parts.append(Path(tmp) / f"episode_{i:06d}.rrd")
                    sinks.append(rr.FileSink(str(parts[-1])))
                rec.set_sinks(*sinks)
                rec.send_recording_name(f"episode {i}")
                log_episode(rec, store, i, jpeg_quality, bar)
                close_stream(rec)
        if out is not None and parts:
            merge_rrd(parts, out)
    return ViewReport(indices, total, out, time.perf_counter() - t0)


def spawn_viewer(rec: Any) -> None:
    """Start a rerun viewer unless one already listens on rerun's port; ``rec`` then streams to it.

    The viewer executable is looked for beside this interpreter first (a venv's ``bin/rerun``, which is not
    on PATH when the venv is not activated), then on PATH.
    """
    rr = rerun_module()
    beside = Path(sys.executable).with_name("rerun")
    rr.spawn(connect=False, recording=rec, executable_path=str(beside) if beside.is_file() else None)


def close_stream(rec: Any) -> None:
    """Flush and close a recording; a viewer that never answered is a RuntimeError that says what to do."""
    try:
        rec.flush()
    except RuntimeError as exc:
        raise RuntimeError(f"no rerun viewer could be reached ({exc}); on a machine without a display, save "
                           "the recording with --rrd OUT.rrd and open it elsewhere") from exc
    finally:
        rec.disconnect()


def merge_rrd(parts: Sequence[Path], out: Path) -> Path:
    """Put the recordings of ``parts`` into one file ``out`` (``rerun rrd merge`` keeps them apart)."""
    if len(parts) == 1:
        os.replace(parts[0], out)
        return out
    tmp = out.with_name(f".{out.name}.tmp")
    proc = subprocess.run([sys.executable, "-m", "rerun_cli", "rrd", "merge", *map(str, parts), "-o", str(tmp)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"rerun rrd merge failed: {proc.stderr.strip()[-500:]}")
    os.replace(tmp, out)
    return out
