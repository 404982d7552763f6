"""Import ROS 2 bags (rosbag2, MCAP or sqlite3) into an episode store with the pure-Python ``rosbags``.

A YAML mapping (:class:`BagMapping`) names which topic (and which message field) becomes which
observation field and the action. The topics arrive at their own rates; they are resampled onto one
fixed grid ``t_k = t_0 + k / fps`` by *zero-order hold with a tolerance*: at each ``t_k`` every feature
takes its newest message stamped at or before ``t_k``, and only if that message is at most
``tolerance_s`` old. A grid time where some feature has no such message is a gap: the bag is split
there into separate episodes (runs shorter than ``min_steps`` are dropped), so no step ever holds
data staler than the tolerance. Stamps come from ``header.stamp`` when the message has one (else the
bag's receive time), or always from the receive time with ``stamp: receive``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.schema import DatasetError, DatasetInfo
from robot_rl.data.store import EpisodeStore

MAX_SAMPLES = 10_000_000
"""Most grid times one import resamples onto (a 10 Hz grid of 11 days): bounds memory on hostile stamps."""
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


@dataclass
class TopicField:
    """Where one feature comes from."""

    topic: str
    """Topic name, e.g. /joint_states."""
    field: str = ""
    """Dotted path into the message (e.g. "position", "pose.position"); empty for image topics."""
    joints: list[str] = dc_field(default_factory=list)
    """For JointState-like messages: take these joint names in this order (empty: all, as recorded)."""

    def __post_init__(self) -> None:
        if not self.topic.startswith("/"):
            raise ValueError(f"topic: must be an absolute topic name, got {self.topic!r}")


@dataclass
class BagMapping:
    """How a bag becomes episodes: topic -> feature mapping and the resampling rule."""

    observation: dict[str, TopicField]
    """Observation field name -> source; image topics give uint8 (H, W, 3) RGB images."""
    action: TopicField | None = None
    """Source of the executed action (e.g. the commanded joint positions); None: zeros of length 1."""
    reward: TopicField | None = None
    """Optional reward source (a scalar field); otherwise reward 0."""
    fps: float = 10.0
    """Rate of the resampled steps, in Hz."""
    tolerance_s: float = 0.1
    """Oldest a held message may be at a sample time, in seconds; staler data splits the episode."""
    stamp: Literal["header", "receive"] = "header"
    """Time of a message: its header.stamp (when it has one) or the bag's receive time."""
    min_steps: int = 2
    """Episodes (runs between gaps) with fewer steps are dropped."""
    task: str = ""
    """Task text stored with every episode."""
    robot: str = "unknown"
    """Robot name for the dataset metadata."""
    source: Literal["human", "policy", "scripted"] = "human"
    """Who controlled the robot while the bag was recorded (teleoperated demos: human)."""

    def __post_init__(self) -> None:
        if not self.observation:
            raise ValueError("observation: map at least one topic")
        if not np.isfinite(self.fps) or self.fps <= 0:
            raise ValueError(f"fps: must be positive, got {self.fps}")
        if not self.tolerance_s > 0:
            raise ValueError(f"tolerance_s: must be positive, got {self.tolerance_s}")
        if self.min_steps < 1:
            raise ValueError(f"min_steps: must be >= 1, got {self.min_steps}")


@dataclass
class BagImportReport:
    """What an import did."""

    samples: int = 0
    """Grid times between the first and last common message."""
    episodes: list[int] = dc_field(default_factory=list)
    """Steps of each episode written."""
    stale: dict[str, int] = dc_field(default_factory=dict)
    """Feature -> grid times where its newest message was older than the tolerance (or missing)."""
    dropped_samples: int = 0
    """Valid grid times in runs shorter than ``min_steps``."""


def import_bag(bag: str | Path, dest: str | Path | EpisodeStore, mapping: BagMapping,
               progress: bool = True) -> BagImportReport:
    """Resample the mapped topics of ``bag`` and append the episodes to a store (created if a path)."""
    series = read_series(bag, mapping, progress=progress)
    features = {f"observation.{k}": v for k, v in series.items() if k in mapping.observation}
    for name in ("action", "reward"):
        if name in series:
            features[name] = series[name]
    try:
        grid, values, valid, report = resample(features, mapping.fps, mapping.tolerance_s)
    except DatasetError as exc:
        raise DatasetError(f"{bag}: {exc}") from exc
    if "action" not in values:
        values["action"] = [np.zeros(1, np.float32)] * len(grid)
    info = DatasetInfo(robot=mapping.robot, fps=mapping.fps, task=mapping.task, source=f"rosbag2:{bag}")
    owned = not isinstance(dest, EpisodeStore)
    created = owned and not Path(dest).exists()  # type: ignore[arg-type]
    store = dest if isinstance(dest, EpisodeStore) else (
        EpisodeStore.create(dest, info) if created else EpisodeStore.open(dest, "a"))
    try:
        for start, stop in _runs(valid):
            steps = stop - start - 1  # the last grid time only provides the final next_observation
            if steps < mapping.min_steps:
                report.dropped_samples += stop - start
                continue
            try:
                _write_run(store, mapping, grid, values, start, steps)
            except ValueError as exc:  # DatasetError, SpecError: the store refused a step
                raise DatasetError(f"{bag}: {exc}") from exc
            report.episodes.append(steps)
    except BaseException:
        if created:  # a refused import leaves no half-written new store behind
            store.close()
            shutil.rmtree(dest, ignore_errors=True)  # type: ignore[arg-type]
        raise
    finally:
        if owned:
            store.close()
    return report


def _write_run(store: EpisodeStore, mapping: BagMapping, grid: np.ndarray, values: dict[str, list], start: int,
               steps: int) -> None:
    """One episode from grid times [start, start + steps]; discarded again if any step is rejected."""
    keys = [k for k in values if k.startswith("observation.")]
    obs = [{k[len("observation."):]: values[k][i] for k in keys} for i in range(start, start + steps + 1)]
    with store.begin_episode(task=mapping.task) as writer:
        for j in range(steps):
            i = start + j
            reward = float(np.asarray(values["reward"][i]).reshape(-1)[0]) if "reward" in values else 0.0
            writer.add(Transition(
                observation=obs[j], next_observation=obs[j + 1], action=values["action"][i].astype(np.float32),
                reward=reward, terminated=False, truncated=j == steps - 1, episode_id=writer.episode_id, step=j,
                segment_source=SegmentSource(mapping.source), obs_stamp=float(grid[i]),
                next_obs_stamp=float(grid[i + 1]),
            ))


def read_series(bag: str | Path, mapping: BagMapping, progress: bool = False) -> dict[str, tuple[np.ndarray, list]]:
    """Per feature: (stamps in seconds, sorted; decoded values) for every mapped topic in the bag."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    bag = Path(bag)
    if not bag.exists():
        raise DatasetError(f"{bag}: no such bag")
    sources: dict[str, TopicField] = {**mapping.observation}
    if mapping.action is not None:
        sources["action"] = mapping.action
    if mapping.reward is not None:
        sources["reward"] = mapping.reward
    out: dict[str, tuple[list[float], list[np.ndarray]]] = {name: ([], []) for name in sources}
    try:
        reader_cm = AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_HUMBLE))
        reader = reader_cm.__enter__()
    except Exception as exc:
        raise DatasetError(f"{bag}: cannot open as a rosbag2 ({type(exc).__name__}: {_line(exc)})") from exc
    try:
        topics = {c.topic: c for c in reader.connections}
        missing = sorted({s.topic for s in sources.values()} - set(topics))
        if missing:
            raise DatasetError(f"{bag}: topic(s) {missing} not in the bag; it has {sorted(topics)}")
        wanted = [topics[t] for t in sorted({s.topic for s in sources.values()})]
        by_topic: dict[str, list[str]] = {}
        for name, src in sources.items():
            by_topic.setdefault(src.topic, []).append(name)
        total = sum(c.msgcount for c in wanted)
        messages = iter(tqdm(reader.messages(connections=wanted), total=total, desc="bag", unit="msg",
                             disable=not progress))
        while True:
            try:  # a corrupt bag fails inside rosbags (reading or deserializing) with any exception type
                item = next(messages, None)
                if item is None:
                    break
                conn, receive_ns, raw = item
                msg = reader.deserialize(raw, conn.msgtype)
            except Exception as exc:
                raise DatasetError(f"{bag}: corrupt message ({type(exc).__name__}: {_line(exc)})") from exc
            header = getattr(msg, "header", None)
            if mapping.stamp == "header" and header is not None:
                stamp = header.stamp.sec + header.stamp.nanosec * 1e-9
            else:
                stamp = receive_ns * 1e-9
            for name in by_topic[conn.topic]:
                src = sources[name]
                try:
                    value = decode_image(msg, conn.msgtype, name) if conn.msgtype in IMAGE_TYPES else \
                        extract_field(msg, src, name)
                except DatasetError as exc:
                    raise DatasetError(f"{bag}: {exc}") from exc
                out[name][0].append(stamp)
                out[name][1].append(value)
    except DatasetError:
        raise
    except Exception as exc:  # rosbags' own reader errors on a corrupt index or chunk
        raise DatasetError(f"{bag}: corrupt bag ({type(exc).__name__}: {_line(exc)})") from exc
    finally:
        reader_cm.__exit__(None, None, None)
    result = {}
    for name, (stamps, values) in out.items():
        if not stamps:
            raise DatasetError(f"{bag}: topic {sources[name].topic} (feature {name}) has no messages")
        order = np.argsort(np.asarray(stamps), kind="stable")
        result[name] = (np.asarray(stamps)[order], [values[i] for i in order])
    return result


def resample(features: dict[str, tuple[np.ndarray, list]], fps: float,
             tolerance_s: float) -> tuple[np.ndarray, dict[str, list], np.ndarray, BagImportReport]:
    """Zero-order hold onto ``t_0 + k / fps``; returns grid, values per feature, validity mask, report."""
    start = max(float(t[0]) for t, _ in features.values())
    # held up to the tolerance past the first feature to end, but never past the bag's last message
    first_end = min(float(t[-1]) for t, _ in features.values())
    end = min(first_end + tolerance_s, max(float(t[-1]) for t, _ in features.values()))
    if end < start:
        raise DatasetError(f"the mapped topics do not overlap in time (latest start {start:.3f} s, "
                           f"earliest end {first_end:.3f} s)")
    samples = np.floor((end - start) * fps + 1e-9) + 1
    if not samples <= MAX_SAMPLES:  # hostile stamps (or fps) would allocate a grid of billions
        raise DatasetError(f"the mapped topics span {end - start:.6g} s: {samples:.3g} samples at {fps} Hz "
                           f"(more than {MAX_SAMPLES}); check the stamps (or use stamp: receive) and fps")
    grid = start + np.arange(int(samples)) / fps
    valid = np.ones(len(grid), dtype=bool)
    values: dict[str, list] = {}
    report = BagImportReport(samples=len(grid))
    for name, (stamps, vals) in features.items():
        idx = np.searchsorted(stamps, grid + 1e-9, side="right") - 1
        ok = (idx >= 0) & (grid - stamps[np.maximum(idx, 0)] <= tolerance_s + 1e-9)
        report.stale[name] = int((~ok).sum())
        valid &= ok
        values[name] = [vals[i] for i in np.maximum(idx, 0)]
        shapes = {np.shape(v) for v in vals}
        if len(shapes) > 1:
            raise DatasetError(f"feature {name}: messages change shape within the bag ({sorted(shapes)})")
    return grid, values, valid, report


def extract_field(msg: Any, src: TopicField, name: str) -> np.ndarray:
    """The float32 vector at ``src.field`` of a message (joint selection by name for JointState)."""
    value = msg
    for part in [p for p in src.field.split(".") if p]:
        if not hasattr(value, part):
            raise DatasetError(f"feature {name}: {type(msg).__name__} on {src.topic} has no field {src.field!r}")
        value = getattr(value, part)
    if src.joints:
        names = list(getattr(msg, "name", []))
        missing = [j for j in src.joints if j not in names]
        if missing:
            raise DatasetError(f"feature {name}: joints {missing} not in {src.topic} (it has {names})")
        if len(value) != len(names):
            raise DatasetError(f"feature {name}: {src.topic} field {src.field!r} has {len(value)} values for "
                               f"{len(names)} joint names")
        value = np.asarray(value)[[names.index(j) for j in src.joints]]
    if hasattr(value, "x") and hasattr(value, "y"):
        value = [getattr(value, a) for a in ("x", "y", "z", "w") if hasattr(value, a)]
    try:
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise DatasetError(f"feature {name}: field {src.field!r} of {src.topic} is not numeric") from None
    if arr.size == 0:
        raise DatasetError(f"feature {name}: field {src.field!r} of {src.topic} is empty")
    if not np.all(np.isfinite(arr)):
        raise DatasetError(f"feature {name}: non-finite value in {src.topic} field {src.field!r}")
    with np.errstate(over="ignore"):
        out = arr.astype(np.float32)
    if not np.all(np.isfinite(out)):
        raise DatasetError(f"feature {name}: value beyond float32 range in {src.topic} field {src.field!r}")
    return out


def decode_image(msg: Any, msgtype: str, name: str) -> np.ndarray:
    """sensor_msgs Image (rgb8, bgr8, rgba8, bgra8, mono8) or CompressedImage -> uint8 (H, W, 3) RGB."""
    import cv2

    if msgtype.endswith("CompressedImage"):
        img = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise DatasetError(f"feature {name}: cannot decode a {msg.format!r} compressed image")
        return np.ascontiguousarray(img[:, :, ::-1])
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
    if msg.encoding not in channels:
        raise DatasetError(f"feature {name}: image encoding {msg.encoding!r} not supported ({sorted(channels)})")
    c = channels[msg.encoding]
    if msg.height == 0 or msg.width == 0:
        raise DatasetError(f"feature {name}: empty {msg.height}x{msg.width} image")
    data = np.frombuffer(bytes(msg.data), np.uint8)
    if msg.step < msg.width * c or data.size < msg.step * msg.height:
        raise DatasetError(f"feature {name}: image data ({data.size} bytes) too short for "
                           f"{msg.height}x{msg.width} {msg.encoding} (step {msg.step})")
    img = data[: msg.step * msg.height].reshape(msg.height, msg.step)[:, : msg.width * c].reshape(
        msg.height, msg.width, c)
    if c == 1:
        return np.repeat(img, 3, axis=2)
    if msg.encoding.startswith("bgr"):
        img = img[:, :, [2, 1, 0]]
    return np.ascontiguousarray(img[:, :, :3])


def _line(exc: BaseException) -> str:
    """An exception's message on one line (YAML and CDR errors span several)."""
    return " ".join(str(exc).split())[:300]


def _runs(valid: Sequence[bool] | np.ndarray) -> Iterable[tuple[int, int]]:
    """[start, stop) of each run of True."""
    padded = np.concatenate([[False], np.asarray(valid, bool), [False]])
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return zip(edges[::2].tolist(), edges[1::2].tolist())
