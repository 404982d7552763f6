"""Export an episode store to the LeRobot dataset v3.0 layout, written with pyarrow and PyAV.

LeRobot itself needs Python >= 3.12 and torch < 2.12, so it cannot sit beside our torch; this module
writes the same files its ``LeRobotDataset`` reads::

    meta/info.json, meta/stats.json, meta/tasks.parquet, meta/episodes/chunk-000/file-000.parquet
    data/chunk-000/file-000.parquet            many episodes per file (rolls over at ~100 MB)
    videos/observation.images.<cam>/chunk-000/file-000.mp4   one long video per camera and file

Feature names follow LeRobot: ``observation.state`` (all non-image observation fields concatenated,
named ``<field>.<i>``), ``observation.images.<cam>``, ``action``, ``next.reward``, ``next.done``
(terminated or truncated), ``next.truncated``, and HIL-SERL-style ``complementary_info.*`` columns for
interventions and provenance (``is_intervention``, ``segment_source``, ``segment_id``, ``policy_version``,
``policy_action``, ``base_action``, stamps). Our own metadata (controller, cameras, state layout) goes to
``meta/robot_rl.json``, which LeRobot ignores. The one thing LeRobot's format cannot hold is the final
``next_observation`` of an episode.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from robot_rl.core.config import config_to_dict
from robot_rl.data.schema import SEGMENT_SOURCES, DatasetError
from robot_rl.data.stats import QUANTILES, RunningStats, stats_to_json
from robot_rl.data.store import EpisodeStore
from robot_rl.data.video import VideoWriter, pick_encoder

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_FILE_MB = 100
VIDEO_FILE_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
IMAGE_PREFIX = "observation.images."
# complementary_info.<name> <- store column, dtype, width (None: scalar)
COMPLEMENTARY: tuple[tuple[str, str], ...] = (
    ("is_intervention", "bool"), ("segment_source", "int64"), ("segment_id", "int64"),
    ("policy_version", "int64"), ("obs_stamp", "float64"), ("next_obs_stamp", "float64"),
)


def state_names(store: EpisodeStore) -> list[str]:
    """Names of the ``observation.state`` elements: ``<field>.<i>`` (or ``<field>`` for 1-element fields)."""
    assert store.schema is not None
    names: list[str] = []
    for key in store.schema.state_keys:
        size = int(np.prod(store.schema.observation[key].shape))
        names += [key] if size == 1 else [f"{key}.{i}" for i in range(size)]
    return names


def lerobot_features(store: EpisodeStore, fps: int, codec: str,
                     proposed: Sequence[str] = ("policy_action", "base_action")) -> dict[str, dict[str, Any]]:
    """The ``features`` block of info.json for this store."""
    schema = store.schema
    assert schema is not None
    feats: dict[str, dict[str, Any]] = {}
    if schema.state_keys:
        names = state_names(store)
        feats["observation.state"] = {"dtype": "float32", "shape": [len(names)], "names": names}
    for key in schema.image_keys:
        h, w, c = schema.observation[key].shape
        feats[IMAGE_PREFIX + key] = {
            "dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"],
            "info": {"video.height": h, "video.width": w, "video.codec": codec, "video.pix_fmt": "yuv420p",
                     "video.fps": fps, "video.channels": c, "has_audio": False, "is_depth_map": False},
        }
    action_names = [f"action.{i}" for i in range(schema.action_dim)]
    feats["action"] = {"dtype": "float32", "shape": [schema.action_dim], "names": action_names}
    feats["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    feats["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    feats["next.truncated"] = {"dtype": "bool", "shape": [1], "names": None}
    for name, dtype in COMPLEMENTARY:
        feats[f"complementary_info.{name}"] = {"dtype": dtype, "shape": [1], "names": None}
    for name in proposed:  # only the proposals that were recorded
        feats[f"complementary_info.{name}"] = {"dtype": "float32", "shape": [schema.action_dim], "names": action_names}
    feats["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        feats[name] = {"dtype": "int64", "shape": [1], "names": None}
    return feats


def export_lerobot(store: EpisodeStore, out: str | Path, episodes: Sequence[int] | None = None,
                   encoder: str | None = None, overwrite: bool = False, progress: bool = True,
                   repo_id: str = "local/robot_rl") -> Path:
    """Write ``store`` (or some ``episodes`` of it) as a LeRobot v3.0 dataset at ``out``; returns ``out``."""
    out = Path(out)
    replace = out.exists() and any(out.iterdir())
    if replace and not overwrite:
        raise DatasetError(f"{out}: exists and is not empty; pass overwrite=True to replace it")
    if store.schema is None or store.num_episodes == 0:
        raise DatasetError(f"{store.path}: no episodes to export")
    fps = round(store.info.fps)
    if abs(fps - store.info.fps) > 1e-6:
        raise DatasetError(f"{store.path}: LeRobot needs an integer fps, the store has {store.info.fps}")
    try:
        enc_name, codec, _ = pick_encoder(encoder)
    except RuntimeError as exc:  # an unknown --encoder name: refused before anything is replaced
        raise DatasetError(f"{store.path}: {exc}") from None
    if replace:  # only once the export is known to start: a refusal keeps the old export
        shutil.rmtree(out)
    selected = list(range(store.num_episodes)) if episodes is None else list(episodes)
    proposed = tuple(name for name in ("policy_action", "base_action") if _ever_set(store, name, selected))
    feats = lerobot_features(store, fps, codec, proposed)
    schema = store.schema
    tasks = sorted({store.episode_info(i).task for i in selected}, key=store.tasks.index)
    stats = {k: RunningStats(_stat_shape(v), image=v["dtype"] == "video") for k, v in feats.items()}
    data_out = _RollingParquet(out, feats)
    videos = {key: _RollingVideo(out, IMAGE_PREFIX + key, fps, enc_name) for key in schema.image_keys}
    episode_rows = []
    index = 0
    try:
        for new_index, ep in enumerate(tqdm(selected, desc="export", unit="episode", disable=not progress)):
            row = _export_episode(store, ep, new_index, index, tasks, fps, feats, data_out, videos, stats)
            episode_rows.append(row)
            index += int(row["length"])
    finally:
        data_out.close()
        for video in videos.values():
            video.close()
    _write_meta(out, store, feats, tasks, episode_rows, stats, fps, index, repo_id, enc_name)
    return out


def _export_episode(store: EpisodeStore, ep: int, new_index: int, first: int, tasks: list[str], fps: int,
                    feats: dict[str, dict[str, Any]], data_out: _RollingParquet, videos: dict[str, _RollingVideo],
                    stats: dict[str, RunningStats]) -> dict[str, Any]:
    """Write one episode's rows and frames; returns its meta/episodes row (with per-episode stats)."""
    info = store.episode_info(ep)
    cols = store.read_episode(ep)
    n = info.length
    columns = _frame_columns(store, cols, n, new_index, first, tasks.index(info.task), fps)
    columns = {k: v for k, v in columns.items() if k in feats}
    data_file = data_out.write(columns)
    row: dict[str, Any] = {"episode_index": new_index, "tasks": [info.task], "length": n,
                           "data/chunk_index": data_file // CHUNKS_SIZE, "data/file_index": data_file % CHUNKS_SIZE,
                           "dataset_from_index": first, "dataset_to_index": first + n}
    for key, video in videos.items():
        file_index, start = video.write(cols[f"observation.{key}"])
        prefix = f"videos/{IMAGE_PREFIX}{key}/"
        row.update({prefix + "chunk_index": file_index // CHUNKS_SIZE, prefix + "file_index": file_index % CHUNKS_SIZE,
                    prefix + "from_timestamp": start / fps, prefix + "to_timestamp": (start + n) / fps})
    ep_stats = {k: RunningStats(_stat_shape(v), image=v["dtype"] == "video") for k, v in feats.items()}
    for key, values in columns.items():
        _update(ep_stats[key], values)
    for key in videos:
        ep_stats[IMAGE_PREFIX + key].update(cols[f"observation.{key}"])
    for key, acc in ep_stats.items():
        stats[key].merge(acc)
        result = acc.result() if acc.count else _empty_stats(acc)
        for stat, value in result.items():
            row[f"stats/{key}/{stat}"] = np.asarray(value).tolist()
    row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    return row


def _empty_stats(acc: RunningStats) -> dict[str, np.ndarray]:
    """NaN statistics for a feature with no valid row in an episode (e.g. no policy ran)."""
    nan = np.full(acc.shape, np.nan)
    return {**{k: nan for k in ("mean", "std", "min", "max", *QUANTILES)}, "count": np.array([0])}


def _ever_set(store: EpisodeStore, column: str, episodes: Sequence[int]) -> bool:
    """Whether any step of ``episodes`` has a ``column`` (policy/base action) proposal."""
    arr = store.array(column)
    return any(not np.isnan(arr[slice(*store.bounds(i)), 0]).all() for i in episodes)


def _stat_shape(feature: dict[str, Any]) -> tuple[int, ...]:
    return tuple(feature["shape"]) if feature["dtype"] == "video" else (int(np.prod(feature["shape"])),)


def _update(acc: RunningStats, values: np.ndarray) -> None:
    flat = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    flat = flat[~np.isnan(flat).any(axis=1)]  # "not proposed" rows of policy/base actions
    acc.update(flat)


def _frame_columns(store: EpisodeStore, cols: dict[str, np.ndarray], n: int, episode_index: int, first_index: int,
                   task_index: int, fps: int) -> dict[str, np.ndarray]:
    schema = store.schema
    assert schema is not None
    out: dict[str, np.ndarray] = {}
    if schema.state_keys:
        out["observation.state"] = np.concatenate(
            [cols[f"observation.{k}"].reshape(n, -1).astype(np.float32) for k in schema.state_keys], axis=1)
    out["action"] = cols["action"]
    out["next.reward"] = cols["reward"].astype(np.float32)
    out["next.done"] = cols["terminated"] | cols["truncated"]
    out["next.truncated"] = cols["truncated"]
    for name, dtype in COMPLEMENTARY:
        out[f"complementary_info.{name}"] = cols[name].astype(dtype)
    out["complementary_info.policy_action"] = cols["policy_action"]
    out["complementary_info.base_action"] = cols["base_action"]
    out["timestamp"] = (np.arange(n) / fps).astype(np.float32)
    out["frame_index"] = np.arange(n, dtype=np.int64)
    out["episode_index"] = np.full(n, episode_index, dtype=np.int64)
    out["index"] = np.arange(first_index, first_index + n, dtype=np.int64)
    out["task_index"] = np.full(n, task_index, dtype=np.int64)
    return out


def _arrow_type(feature: dict[str, Any]) -> pa.DataType:
    scalar = pa.from_numpy_dtype(np.dtype(feature["dtype"]))
    return scalar if list(feature["shape"]) == [1] else pa.list_(scalar, int(feature["shape"][0]))


def _hf_feature(feature: dict[str, Any]) -> dict[str, Any]:
    value = {"dtype": feature["dtype"], "_type": "Value"}
    if list(feature["shape"]) == [1]:
        return value
    return {"feature": value, "length": feature["shape"][0], "_type": "List"}


class _RollingParquet:
    """data/chunk-XXX/file-YYY.parquet, one row group per episode, a new file past DATA_FILE_MB."""

    def __init__(self, root: Path, feats: dict[str, dict[str, Any]]) -> None:
        self.root = root
        self.names = [k for k, v in feats.items() if v["dtype"] != "video"]
        hf = {"info": {"features": {k: _hf_feature(feats[k]) for k in self.names}}}
        self.schema = pa.schema([pa.field(k, _arrow_type(feats[k])) for k in self.names],
                                metadata={"huggingface": json.dumps(hf)})
        self.file_index, self.bytes = 0, 0
        self.writer: pq.ParquetWriter | None = None

    def write(self, columns: dict[str, np.ndarray]) -> int:
        arrays = []
        for name, field in zip(self.names, self.schema):
            values = columns[name]
            if pa.types.is_fixed_size_list(field.type):
                flat = pa.array(np.ascontiguousarray(values).reshape(-1), type=field.type.value_type)
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, field.type.list_size))
            else:
                arrays.append(pa.array(np.asarray(values).reshape(-1), type=field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if self.writer is not None and self.bytes + table.nbytes > DATA_FILE_MB * 2**20:
            self.close()
            self.file_index += 1
        if self.writer is None:
            path = self.root / DATA_PATH.format(chunk_index=self.file_index // CHUNKS_SIZE,
                                                file_index=self.file_index % CHUNKS_SIZE)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer, self.bytes = pq.ParquetWriter(path, self.schema), 0
        self.writer.write_table(table)
        self.bytes += table.nbytes
        return self.file_index

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _RollingVideo:
    """videos/<key>/chunk-XXX/file-YYY.mp4 for one camera, a new file past VIDEO_FILE_MB."""

    def __init__(self, root: Path, video_key: str, fps: int, encoder: str) -> None:
        self.root, self.key, self.fps, self.encoder = root, video_key, fps, encoder
        self.file_index = 0
        self.writer: VideoWriter | None = None

    def write(self, frames: np.ndarray) -> tuple[int, int]:
        """Append an episode; returns (file index, first frame of the episode in that file)."""
        if self.writer is not None and self.writer.bytes > VIDEO_FILE_MB * 2**20:
            self.close()
            self.file_index += 1
        if self.writer is None:
            path = self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.file_index // CHUNKS_SIZE,
                                                 file_index=self.file_index % CHUNKS_SIZE)
            self.writer = VideoWriter(path, self.fps, frames.shape[1], frames.shape[2], encoder=self.encoder)
        start = self.writer.frames
        for frame in frames:
            self.writer.add(frame)
        return self.file_index, start

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _write_meta(out: Path, store: EpisodeStore, feats: dict[str, dict[str, Any]], tasks: list[str],
                episode_rows: list[dict[str, Any]], stats: dict[str, RunningStats], fps: int, total_frames: int,
                repo_id: str, encoder: str) -> None:
    meta = out / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    info = {
        "codebase_version": CODEBASE_VERSION, "fps": fps, "features": feats,
        "total_episodes": len(episode_rows), "total_frames": total_frames, "total_tasks": len(tasks),
        "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": DATA_FILE_MB, "video_files_size_in_mb": VIDEO_FILE_MB,
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if store.schema and store.schema.image_keys else None,
        "robot_type": store.info.robot, "splits": {"train": f"0:{len(episode_rows)}"},
    }
    (meta / "info.json").write_text(json.dumps(info, indent=4), encoding="utf-8")
    (meta / "stats.json").write_text(json.dumps(stats_to_json({k: v.result() for k, v in stats.items()}),
                                                indent=4), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(episode_rows), out / EPISODES_PATH)
    _write_tasks(meta / "tasks.parquet", tasks)
    ours = {"format": "robot_rl.lerobot_export", "info": config_to_dict(store.info), "repo_id": repo_id,
            "state_fields": {k: list(store.schema.observation[k].shape) for k in store.schema.state_keys}
            if store.schema else {}, "segment_sources": list(SEGMENT_SOURCES), "encoder": encoder,
            "source_store": str(store.path)}
    (meta / "robot_rl.json").write_text(json.dumps(ours, indent=2), encoding="utf-8")


def _write_tasks(path: Path, tasks: Iterable[str]) -> None:
    """tasks.parquet as pandas writes it: column task_index, index "task" (LeRobot reads it with pandas)."""
    tasks = list(tasks)
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0",
    }
    schema = pa.schema([pa.field("task_index", pa.int64()), pa.field("task", pa.string())],
                       metadata={"pandas": json.dumps(pandas_meta)})
    table = pa.Table.from_arrays([pa.array(range(len(tasks)), pa.int64()), pa.array(tasks, pa.string())],
                                 schema=schema)
    pq.write_table(table, path)
