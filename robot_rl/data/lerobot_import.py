"""Import a LeRobot v3.0 dataset (ours or anyone's) into an episode store, with pyarrow and PyAV.

Mapping back: ``observation.state`` is split into fields by its element names (``<field>.<i>``; with
no usable names it stays one field ``state``), other non-image ``observation.*`` features become fields
of their own, ``observation.images.<cam>`` (video or image features) become uint8 images ``<cam>``.
``next.done`` / ``next.truncated`` give terminated/truncated (a dataset without them ends each episode
truncated); intervention flags come from ``complementary_info.is_intervention`` or DAgger's
``intervention`` column. LeRobot keeps no final ``next_observation``: the last step of an episode gets
its own observation again and ``next_obs_stamp = obs_stamp + 1/fps``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.lerobot_export import IMAGE_PREFIX
from robot_rl.data.schema import SEGMENT_SOURCES, DatasetError, DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.data.video import read_video

_BOOKKEEPING = {"timestamp", "frame_index", "episode_index", "index", "task_index"}


_MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError, OSError, EOFError, pa.ArrowException,
              av.error.FFmpegError)
"""What reading a corrupt or hostile dataset raises (pyarrow, PyAV: a truncated mp4 can lose its codec, which is
DecoderNotFoundError, a LookupError; json fields of the wrong type)."""


def import_lerobot(src: str | Path, dest: str | Path, default_source: str = "human",
                   progress: bool = True) -> EpisodeStore:
    """Read the LeRobot v3.0 dataset at ``src`` into a new episode store at ``dest`` (returned open).

    Any problem is one DatasetError naming ``src``; a refused import leaves no store at ``dest``.
    """
    src, dest = Path(src), Path(dest)
    if dest.exists():
        raise DatasetError(f"{src}: cannot import into {dest}: it already exists")
    try:
        return _import(src, dest, default_source, progress)
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)  # only _import created it: nothing stored before is lost
        if isinstance(exc, DatasetError) and str(src) in str(exc):
            raise
        if isinstance(exc, _MALFORMED):
            text = " ".join(str(exc).split())[:300]
            what = "" if isinstance(exc, DatasetError) else f"malformed dataset ({type(exc).__name__}) "
            raise DatasetError(f"{src}: {what}{text}") from exc
        raise


def _import(src: Path, dest: Path, default_source: str, progress: bool) -> EpisodeStore:
    info = _read_json(src / "meta" / "info.json")
    version = str(info.get("codebase_version", "?"))
    if not version.startswith("v3"):
        raise DatasetError(f"{src}: codebase_version {version!r} is not v3.x; convert it with LeRobot first")
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (np.isfinite(fps) and fps > 0):
        raise DatasetError(f"{src}: meta/info.json fps must be a positive number, got {fps!r}")
    fps = float(fps)
    features: dict[str, dict[str, Any]] = info.get("features")  # type: ignore[assignment]
    if not isinstance(features, dict) or not all(isinstance(v, dict) and isinstance(v.get("dtype"), str)
                                                 for v in features.values()):
        raise DatasetError(f"{src}: meta/info.json features must map names to {{dtype, shape}} objects")
    for key in ("data_path", *(("video_path",) if any(v["dtype"] == "video" for v in features.values()) else ())):
        if not isinstance(info.get(key), str):
            raise DatasetError(f"{src}: meta/info.json {key} must be a path template, got {info.get(key)!r}")
    ours = _read_json(src / "meta" / "robot_rl.json") if (src / "meta" / "robot_rl.json").is_file() else {}
    tasks = _read_tasks(src / "meta" / "tasks.parquet")
    episodes = pq.read_table(src / "meta" / "episodes").to_pylist() if (src / "meta" / "episodes").is_dir() else []
    if not episodes:
        raise DatasetError(f"{src}: meta/episodes holds no episode rows")
    episodes.sort(key=lambda r: r["episode_index"])
    cameras = [k[len(IMAGE_PREFIX):] for k, v in features.items()
               if k.startswith(IMAGE_PREFIX) and v["dtype"] in ("video", "image")]
    if ours.get("info"):
        meta = DatasetInfo(**{**ours["info"], "source": f"lerobot:{src}"})
    else:
        meta = DatasetInfo(robot=str(info.get("robot_type") or "unknown"), fps=fps, task=tasks[0] if tasks else "",
                           cameras={c: dict(features[IMAGE_PREFIX + c].get("info") or {}) for c in cameras},
                           source=f"lerobot:{src}")
    splitter = _state_splitter(features.get("observation.state"), ours.get("state_fields"))
    store = EpisodeStore.create(dest, meta)
    tables: dict[Path, dict[str, np.ndarray]] = {}
    for row in tqdm(episodes, desc="import", unit="episode", disable=not progress):
        ep = int(row["episode_index"])
        data_path = src / info["data_path"].format(chunk_index=row["data/chunk_index"],
                                                   file_index=row["data/file_index"])
        if src.resolve() not in data_path.resolve().parents:
            raise DatasetError(f"{src}: data path {data_path} is outside the dataset")
        if data_path not in tables:
            tables.clear()  # one data file in memory at a time
            tables[data_path] = _read_columns(data_path)
        cols = tables[data_path]
        mask = cols["episode_index"] == ep
        n = int(mask.sum())
        if n != int(row["length"]):
            raise DatasetError(f"episode {ep}, field length: meta says {row['length']}, {data_path.name} has {n} rows")
        frames = {k: v[mask] for k, v in cols.items()}
        order = np.argsort(frames["frame_index"])
        frames = {k: v[order] for k, v in frames.items()}
        if not np.array_equal(frames["frame_index"], np.arange(n)):
            raise DatasetError(f"episode {ep}, field frame_index: not 0..{n - 1}")
        images = {c: _episode_images(src, info, row, c, n, fps, features[IMAGE_PREFIX + c], frames)
                  for c in cameras}
        task = str(row["tasks"][0]) if row.get("tasks") else (tasks[int(frames["task_index"][0])] if tasks else "")
        store.add_episode(_transitions(frames, images, splitter, features, store.num_episodes, fps, default_source),
                          task=task)
    return store


def _transitions(frames: Mapping[str, np.ndarray], images: Mapping[str, np.ndarray],
                 splitter: Callable[[np.ndarray], dict[str, np.ndarray]], features: Mapping[str, Any],
                 episode_id: int, fps: float, default_source: str) -> list[Transition]:
    n = len(frames["frame_index"])
    obs_cols: dict[str, np.ndarray] = {}
    if "observation.state" in frames:
        obs_cols.update(splitter(frames["observation.state"].astype(np.float32)))
    for key, values in frames.items():
        if key.startswith("observation.") and key != "observation.state" and not key.startswith(IMAGE_PREFIX):
            obs_cols[key[len("observation."):]] = values.astype(np.float32).reshape(n, -1)
    obs_cols.update(images)
    if not obs_cols:
        raise DatasetError(f"episode {episode_id}: no observation.* features to import")
    stamps = frames.get("complementary_info.obs_stamp", frames["timestamp"]).astype(np.float64).reshape(n)
    next_stamps = frames.get("complementary_info.next_obs_stamp", np.append(stamps[1:], stamps[-1] + 1.0 / fps))
    next_stamps = np.asarray(next_stamps, np.float64).reshape(n)
    if not (np.all(np.isfinite(stamps)) and np.all(np.diff(stamps) >= 0) and np.all(next_stamps >= stamps)):
        raise DatasetError(f"episode {episode_id}, field timestamp: not finite and non-decreasing")
    done = frames.get("next.done", np.zeros(n, bool)).astype(bool).reshape(n)
    truncated = frames.get("next.truncated", np.zeros(n, bool)).astype(bool).reshape(n)
    if "next.done" not in frames:
        truncated = np.arange(n) == n - 1
    if np.any((done | truncated)[:-1]):
        raise DatasetError(f"episode {episode_id}, field next.done: set before the last frame")
    terminated = done & ~truncated
    intervention = frames.get("complementary_info.is_intervention", frames.get("intervention", np.zeros(n, bool)))
    intervention = np.asarray(intervention).astype(bool).reshape(n)
    sources = frames.get("complementary_info.segment_source")
    out = []
    for i in range(n):
        obs = {k: v[i] for k, v in obs_cols.items()}
        nxt = {k: v[i + 1] for k, v in obs_cols.items()} if i + 1 < n else obs
        if sources is not None:
            source = SegmentSource(SEGMENT_SOURCES[int(sources[i])])
        else:
            source = SegmentSource.HUMAN if intervention[i] else SegmentSource(default_source)
        out.append(Transition(
            observation=obs, next_observation=nxt, action=frames["action"][i].astype(np.float32),
            policy_action=_optional(frames, "complementary_info.policy_action", i),
            base_action=_optional(frames, "complementary_info.base_action", i),
            reward=float(frames["next.reward"][i]) if "next.reward" in frames else 0.0,
            terminated=bool(terminated[i]), truncated=bool(truncated[i]), is_intervention=bool(intervention[i]),
            segment_source=source, segment_id=int(frames.get("complementary_info.segment_id", np.zeros(n))[i]),
            policy_version=int(frames.get("complementary_info.policy_version", np.full(n, -1))[i]),
            episode_id=episode_id, step=i, obs_stamp=float(stamps[i]), next_obs_stamp=float(next_stamps[i]),
        ))
    return out


def _optional(frames: Mapping[str, np.ndarray], key: str, i: int) -> np.ndarray | None:
    if key not in frames or np.isnan(frames[key][i]).any():
        return None
    return frames[key][i].astype(np.float32)


def _state_splitter(feature: Mapping[str, Any] | None,
                    layout: Mapping[str, list[int]] | None) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """Split observation.state columns into named fields (our layout, else ``<field>.<i>`` names)."""
    if feature is None:
        return lambda values: {}
    fields: list[tuple[str, tuple[int, ...]]] = []
    if layout:
        fields = [(k, tuple(s)) for k, s in layout.items()]
    else:
        names = feature.get("names")
        names = list(names) if isinstance(names, list) and all(isinstance(x, str) for x in names) else None
        width = int(np.prod(feature["shape"]))
        if names and len(names) == width and all("." in x for x in names):
            prefixes = [x.rsplit(".", 1)[0] for x in names]
            for p in dict.fromkeys(prefixes):
                fields.append((p, (prefixes.count(p),)))
            if [p for p, (c,) in fields for _ in range(c)] != prefixes:
                fields = [("state", (width,))]  # names of one field are not contiguous
        else:
            fields = [("state", (width,))]

    def split(values: np.ndarray) -> dict[str, np.ndarray]:
        if values.ndim != 2:
            raise DatasetError(f"field observation.state: expected a list column, got shape {values.shape}")
        out, col = {}, 0
        for name, shape in fields:
            size = int(np.prod(shape))
            out[name] = values[:, col: col + size].reshape(len(values), *shape)
            col += size
        if col != values.shape[1]:
            raise DatasetError(f"field observation.state: {values.shape[1]} columns, layout expects {col}")
        return out

    return split


def _episode_images(src: Path, info: Mapping[str, Any], row: Mapping[str, Any], cam: str, n: int, fps: float,
                    feature: Mapping[str, Any], frames: Mapping[str, np.ndarray]) -> np.ndarray:
    """Decode one camera of an episode: from its mp4 (dtype video) or the PNGs inside the parquet (image)."""
    key = IMAGE_PREFIX + cam
    where = f"episode {row['episode_index']}, field {key}"
    if feature["dtype"] == "video":
        path = src / info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                               file_index=row[f"videos/{key}/file_index"])
        try:
            return read_video(path, fps, start_s=float(row[f"videos/{key}/from_timestamp"]), count=n)
        except (ValueError, OSError) as exc:
            raise DatasetError(f"{where}: {exc}") from exc
    import cv2

    out = []
    for i, cell in enumerate(frames.get(key, [])):
        data = cell.get("bytes") if isinstance(cell, dict) else None
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
        if img is None:
            raise DatasetError(f"{where}: frame {i} holds no decodable image")
        out.append(np.ascontiguousarray(img[:, :, ::-1]))
    if len(out) != n:
        raise DatasetError(f"{where}: {len(out)} images for {n} frames")
    return np.stack(out)


def _read_columns(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise DatasetError(f"{path}: data file missing")
    table = pq.read_table(path)
    out = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
            width = len(col[0]) if len(col) else 0
            out[name] = np.asarray(col.flatten().to_numpy(zero_copy_only=False)).reshape(len(col), width)
        elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            continue
        else:
            out[name] = np.asarray(col.to_numpy(zero_copy_only=False))
    return out


def _read_tasks(path: Path) -> list[str]:
    if not path.is_file():
        return []
    rows = pq.read_table(path).to_pylist()
    rows.sort(key=lambda r: r["task_index"])
    return [str(r.get("task", r.get("__index_level_0__", ""))) for r in rows]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from exc
