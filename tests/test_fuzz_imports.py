"""Property-based fuzzing of the dataset imports (rosbag2 MCAP / sqlite3, LeRobot v3).

Property of every hostile import: it either succeeds with valid content or raises a ValueError (DatasetError)
whose one-line message names the source, within a bounded time; the source files are left byte for byte as
they were, and a destination store that existed before is unchanged after a refused import (a refused
import into a new path leaves no store behind). CLI: every generated argument list ends with exit code
0, 1 or 2 and a one-line error (or argparse's usage), never a traceback and never a hang.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.fuzz import exported_dataset, fresh_copy, fuzz_settings, tally, tree_digest
from hypothesis import example, given
from hypothesis import strategies as st

from robot_rl.data.lerobot_import import import_lerobot
from robot_rl.data.rosbag_import import BagMapping, TopicField, import_bag

FUZZ = fuzz_settings(30)
SHARED = fuzz_settings(30, drill_share=2)
"""A test that is one of two feeding the same entry point (its inputs and the other's add up in a drill)."""
SLOW_S = 20.0
"""Bound on one import (generous: the suite shares two cores with other test runs)."""
JOINTS = ["j1", "j2", "j3"]
T0 = 1_700_000_000




def check_import(entry: str, load: Callable[[], Any], src: Path, dest: Path) -> BaseException | None:
    """Run ``load``: a refusal is a one-line ValueError naming ``src``; ``src`` is never changed, nor is an
    existing ``dest`` by a refusal (a new ``dest`` is not left behind); an accepted store opens and is valid."""
    before_src, before_dest, existed = tree_digest(src), tree_digest(dest), dest.exists()
    error: BaseException | None = None
    start = time.monotonic()
    try:
        load()
    except ValueError as exc:
        error = exc
        assert "\n" not in str(exc), f"multi-line message: {exc!r}"
        assert str(src) in str(exc), f"{src} not named in {exc!r}"
    assert time.monotonic() - start < SLOW_S, "an import took too long"
    assert tree_digest(src) == before_src, "an import changed its source files"
    if error is not None:
        assert tree_digest(dest) == before_dest, "a refused import changed the destination"
        assert dest.exists() == existed, "a refused import left a new store behind"
    else:
        from robot_rl.data.validate import validate_store

        report = validate_store(dest)
        assert report.ok, f"an accepted import is not valid: {report.issues}"
    tally(entry, "accepted" if error is None else f"refused: {type(error).__name__}")
    return error



def mutate(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: max(0, len(data) - cut)])
    for pos, bit in flips:
        if out:
            out[pos % len(out)] ^= 1 << bit
    return bytes(out)


CUTS = st.integers(0, 3000)
FLIPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=4)


# ===================================================================================== rosbag2
def write_bag(path: Path, storage: str, joint_pos: Callable[[int], Any] = lambda i: [0.1 * i, 0.2, -0.3],
              names: list[str] = JOINTS, stamp: Callable[[int], tuple[int, int]] | None = None,
              image: dict[str, Any] | None = None, string_on: str = "") -> None:
    """1 s of 20 Hz joint states and 10 Hz 4x4 rgb8 images; hooks replace contents with hostile ones.

    ``string_on``: that topic carries std_msgs/String instead (a schema the mapping does not expect)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    JointState, Image, String = (ts.types[t] for t in ("sensor_msgs/msg/JointState", "sensor_msgs/msg/Image",
                                                       "std_msgs/msg/String"))
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    img = {"height": 4, "width": 4, "encoding": "rgb8", "step": 12, "data": np.arange(48, dtype=np.uint8),
           **(image or {})}
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        types = {"/joint_states": JointState, "/camera": Image}
        conns = {t: writer.add_connection(t, (String if t == string_on else k).__msgtype__, typestore=ts)
                 for t, k in types.items()}
        for i in range(20):
            sec, nsec = stamp(i) if stamp else (T0, i * 50_000_000)
            header = Header(stamp=Time(sec=sec, nanosec=nsec), frame_id="b")
            for topic in ("/joint_states", "/camera") if i % 2 == 0 else ("/joint_states",):
                if topic == string_on:
                    msg = String(data=f"hostile {i}")
                elif topic == "/joint_states":
                    pos = np.asarray(joint_pos(i), dtype=np.float64)
                    msg = JointState(header=header, name=names, position=pos, velocity=np.zeros(0),
                                     effort=np.zeros(0))
                else:
                    msg = Image(header=header, is_bigendian=0, **img)
                writer.write(conns[topic], (T0 + i) * 1_000_000_000 + i * 50_000_000,
                             ts.serialize_cdr(msg, msg.__msgtype__))


MAPPING = BagMapping(observation={"q": TopicField("/joint_states", "position", ["j3", "j1"]),
                                  "cam": TopicField("/camera")}, fps=10.0, tolerance_s=0.15, min_steps=2)


@pytest.fixture(scope="module")
def bags(fuzz_work: Path) -> dict[str, Path]:
    out = {}
    for storage in ("mcap", "sqlite3"):
        write_bag(fuzz_work / f"bag_{storage}", storage)
        out[storage] = fuzz_work / f"bag_{storage}"
    import_bag(out["mcap"], fuzz_work / "bag_store.zarr", MAPPING, progress=False)
    out["store"] = fuzz_work / "bag_store.zarr"
    return out


def bag_dest(bags: dict[str, Path], folder: Path, existing: bool) -> Path:
    if existing:
        shutil.copytree(bags["store"], folder / "dest.zarr")
    return folder / "dest.zarr"


STORAGES = pytest.mark.parametrize("storage", ["mcap", "sqlite3"])


@STORAGES
@SHARED
@given(target=st.sampled_from(["storage", "metadata.yaml"]), cut=CUTS, flips=FLIPS, existing=st.booleans())
@example(target="storage", cut=100, flips=[], existing=True)
@example(target="storage", cut=0, flips=[(5000, 3)], existing=False)
@example(target="metadata.yaml", cut=40, flips=[], existing=False)
def test_rosbag_file_truncated_or_flipped(bags: dict[str, Path], fuzz_work: Path, storage: str, target: str, cut: int,
                                         flips: list[tuple[int, int]], existing: bool) -> None:
    bag = fresh_copy(bags[storage], fuzz_work)
    file = next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3")) if target == "storage" else \
        bag / "metadata.yaml"
    file.write_bytes(mutate(file.read_bytes(), cut, flips))
    dest = bag_dest(bags, bag.parent, existing)
    entry = f"import: rosbag {'mcap' if storage == 'mcap' else 'db3'}"
    check_import(entry, lambda: import_bag(bag, dest, MAPPING, progress=False), bag, dest)


FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, 1e308, -1e-320])
HOSTILE = st.fixed_dictionaries({}, optional={
    "joint_len": st.integers(0, 6),
    "joint_values": st.lists(FLOATS, min_size=1, max_size=6),
    "joint_len_changes": st.just(True),
    "names": st.lists(st.sampled_from(["j1", "j2", "j3", "j3", "", "x"]), max_size=5),
    "stamp_sec": st.integers(-(2**31), 2**31 - 1),
    "stamp_nsec": st.integers(0, 2**32 - 1),
    "stamps_backwards": st.just(True),
    "image": st.fixed_dictionaries({}, optional={
        "height": st.integers(0, 2**31), "width": st.integers(0, 2**31), "step": st.integers(0, 2**32 - 1),
        "encoding": st.sampled_from(["rgb8", "bgr8", "mono8", "rgba8", "16UC1", "", "yuv422"]),
        "data": st.binary(max_size=80).map(lambda b: np.frombuffer(b, np.uint8))}),
    "string_on": st.sampled_from(["/joint_states", "/camera"]),
})
MAPPINGS = st.fixed_dictionaries({}, optional={
    "fps": st.sampled_from([1e-3, 0.5, 10.0, 200.0, 1e300]), "tolerance_s": st.sampled_from([1e-9, 0.15, 1e9]),
    "stamp": st.sampled_from(["header", "receive"]), "field": st.sampled_from(["position", "name", "header.stamp",
                                                                               "header", "velocity", "nope"]),
    "joints": st.lists(st.sampled_from(["j1", "j3", "zz"]), max_size=3),
    "missing_topic": st.just(True)})


@pytest.mark.slow
@STORAGES
@SHARED
@given(hostile=HOSTILE, mapping=MAPPINGS, existing=st.booleans())
@example(hostile={"joint_values": [float("nan")]}, mapping={}, existing=True)
@example(hostile={"joint_values": [1e308]}, mapping={}, existing=False)
@example(hostile={"stamp_sec": 2**31 - 1, "stamps_backwards": True}, mapping={}, existing=False)
@example(hostile={}, mapping={"fps": 1e300}, existing=False)
@example(hostile={}, mapping={"fps": 1e-3, "tolerance_s": 1e9}, existing=False)  # 10**6 steps
@example(hostile={"image": {"height": 2**31, "step": 12}}, mapping={}, existing=True)
@example(hostile={"image": {"height": 0}}, mapping={}, existing=True)
@example(hostile={"string_on": "/joint_states"}, mapping={}, existing=False)
@example(hostile={"joint_len_changes": True}, mapping={}, existing=False)
@example(hostile={"names": ["j3", "j3", "j1"]}, mapping={"field": "name"}, existing=False)
def test_rosbag_hostile_messages_and_mappings(bags: dict[str, Path], fuzz_work: Path, storage: str,
                                              hostile: dict[str, Any], mapping: dict[str, Any],
                                              existing: bool) -> None:
    folder = Path(tempfile.mkdtemp(dir=fuzz_work))
    bag = folder / "bag"
    values = hostile.get("joint_values", [0.1, 0.2, 0.3])
    length = hostile.get("joint_len", 3)

    def joint_pos(i: int) -> list[float]:
        n = length + (i % 3 if "joint_len_changes" in hostile else 0)
        return [values[(i + k) % len(values)] for k in range(n)]

    def stamp(i: int) -> tuple[int, int]:
        sec = hostile.get("stamp_sec", T0) - (i if "stamps_backwards" in hostile else -i // 20)
        return max(-(2**31), min(2**31 - 1, sec)), (hostile.get("stamp_nsec", 0) + i * 50_000_000) % 2**32

    write_bag(bag, storage, joint_pos, hostile.get("names", JOINTS), stamp if (
        {"stamp_sec", "stamp_nsec", "stamps_backwards"} & set(hostile)) else None, hostile.get("image"),
        hostile.get("string_on", ""))
    topic = "/nope" if "missing_topic" in mapping else "/joint_states"
    bag_map = BagMapping(observation={"q": TopicField(topic, mapping.get("field", "position"),
                                                      mapping.get("joints", ["j3", "j1"])),
                                      "cam": TopicField("/camera")},
                         fps=mapping.get("fps", 10.0), tolerance_s=mapping.get("tolerance_s", 0.15),
                         stamp=mapping.get("stamp", "header"))
    dest = bag_dest(bags, folder, existing)
    entry = f"import: rosbag {'mcap' if storage == 'mcap' else 'db3'}"
    check_import(entry, lambda: import_bag(bag, dest, bag_map, progress=False), bag, dest)


# ===================================================================================== LeRobot v3
@pytest.fixture(scope="module")
def lerobot(fuzz_work: Path) -> dict[str, Path]:
    exported_dataset(fuzz_work, "lr_src")
    import_lerobot(fuzz_work / "lr", fuzz_work / "lr_back.zarr", progress=False).close()
    return {"dataset": fuzz_work / "lr", "store": fuzz_work / "lr_back.zarr"}


def lerobot_import(src: Path, dest: Path) -> Callable[[], None]:
    return lambda: import_lerobot(src, dest, progress=False).close()


def lerobot_dest(lerobot: dict[str, Path], folder: Path, existing: bool) -> Path:
    if existing:  # import never appends: an existing store must be refused and left as it was
        shutil.copytree(lerobot["store"], folder / "dest.zarr")
    return folder / "dest.zarr"


LEROBOT_FILES = {"parquet": ["meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet",
                             "data/chunk-000/file-000.parquet"],
                 "metadata": ["meta/info.json", "meta/robot_rl.json", "meta/stats.json"],
                 "videos": ["videos/observation.images.cam0/chunk-000/file-000.mp4"]}
"""The files of a LeRobot v3 dataset by entry point (the parquet tables, the JSON metadata, the videos)."""
DAMAGE = dict(pick=st.integers(0, 2), cut=CUTS, flips=FLIPS, delete=st.booleans(), existing=st.booleans())


def damaged_lerobot_import(lerobot: dict[str, Path], fuzz_work: Path, kind: str, pick: int, cut: int,
                           flips: list[tuple[int, int]], delete: bool, existing: bool) -> None:
    """One file of the dataset truncated, bit-flipped or deleted, then imported (into an existing store or not)."""
    src = fresh_copy(lerobot["dataset"], fuzz_work)
    file = src / LEROBOT_FILES[kind][pick % len(LEROBOT_FILES[kind])]
    if delete:
        file.unlink()
    else:
        file.write_bytes(mutate(file.read_bytes(), cut, flips))
    dest = lerobot_dest(lerobot, src.parent, existing)
    error = check_import(f"import: lerobot {kind}", lerobot_import(src, dest), src, dest)
    assert error is not None or not existing, "an import overwrote an existing store"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["parquet", "metadata"])
@SHARED
@given(**DAMAGE)
@example(pick=2, cut=200, flips=[], delete=False, existing=False)
@example(pick=1, cut=0, flips=[(99, 1)], delete=False, existing=True)
def test_lerobot_file_truncated_flipped_or_missing(lerobot: dict[str, Path], fuzz_work: Path, kind: str, pick: int,
                                                   cut: int, flips: list[tuple[int, int]], delete: bool,
                                                   existing: bool) -> None:
    damaged_lerobot_import(lerobot, fuzz_work, kind, pick, cut, flips, delete, existing)


@FUZZ
@given(**DAMAGE)
@example(pick=0, cut=0, flips=[], delete=True, existing=False)
@example(pick=0, cut=300, flips=[], delete=False, existing=False)
@example(pick=0, cut=393, flips=[], delete=False, existing=False)  # the codec cut off: DecoderNotFoundError escaped
def test_lerobot_video_truncated_flipped_or_missing(lerobot: dict[str, Path], fuzz_work: Path, pick: int, cut: int,
                                                    flips: list[tuple[int, int]], delete: bool,
                                                    existing: bool) -> None:
    damaged_lerobot_import(lerobot, fuzz_work, "videos", pick, cut, flips, delete, existing)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8)
INFO_KEYS = st.sampled_from(["codebase_version", "fps", "features", "data_path", "video_path", "robot_type",
                             "total_episodes", "chunks_size"])
FEATURE_KEYS = st.sampled_from(["observation.state", "action", "observation.images.cam0", "timestamp",
                                "observation.extra"])
FEATURE_FIELDS = st.sampled_from(["dtype", "shape", "names", "info"])


@SHARED
@given(top=st.dictionaries(INFO_KEYS, JSON_VALUES, max_size=2), feature=FEATURE_KEYS,
       fields=st.dictionaries(FEATURE_FIELDS, JSON_VALUES | st.sampled_from(["video", "image", "float32",
                                                                              [2], [10**9]]), max_size=2),
       drop=st.lists(INFO_KEYS | FEATURE_KEYS, max_size=2), raw=st.none() | st.binary(max_size=40))
@pytest.mark.slow
@example(top={"fps": 0}, feature="action", fields={}, drop=[], raw=None)
@example(top={"fps": "ten"}, feature="action", fields={}, drop=[], raw=None)
@example(top={"features": []}, feature="action", fields={}, drop=[], raw=None)
@example(top={"data_path": "{nope}"}, feature="action", fields={}, drop=[], raw=None)
@example(top={"data_path": "../../../etc/passwd"}, feature="action", fields={}, drop=[], raw=None)
@example(top={}, feature="observation.state", fields={"shape": [10**9]}, drop=[], raw=None)
@example(top={}, feature="observation.images.cam0", fields={"dtype": "image"}, drop=[], raw=None)
@example(top={}, feature="action", fields={}, drop=["fps", "observation.images.cam0"], raw=None)
@example(top={}, feature="action", fields={}, drop=[], raw=b"[]")
def test_lerobot_info_json_hostile(lerobot: dict[str, Path], fuzz_work: Path, top: dict[str, Any], feature: str,
                                   fields: dict[str, Any], drop: list[str], raw: bytes | None) -> None:
    src = fresh_copy(lerobot["dataset"], fuzz_work)
    info_path = src / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    if isinstance(info["features"].get(feature), dict):
        info["features"][feature].update(fields)
    info.update(top)
    for key in drop:
        info.pop(key, None)
        if isinstance(info.get("features"), dict):
            info["features"].pop(key, None)
    info_path.write_bytes(raw if raw is not None else json.dumps(info).encode())
    dest = lerobot_dest(lerobot, src.parent, False)
    check_import("import: lerobot metadata", lerobot_import(src, dest), src, dest)


COLUMNS = st.sampled_from(["observation.state", "action", "timestamp", "frame_index", "episode_index", "index",
                           "task_index", "next.reward", "next.done", "complementary_info.is_intervention",
                           "complementary_info.segment_source", "complementary_info.policy_action"])
CHANGES = st.sampled_from(["drop", "nan", "inf", "string", "float64", "int8", "wider", "narrower", "null",
                           "negative", "huge"])


def _changed(col: pa.ChunkedArray, change: str, rows: int) -> pa.Array | None:
    values = col.combine_chunks()
    listy = pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type)
    flat = np.asarray((values.flatten() if listy else values).to_numpy(zero_copy_only=False))
    width = len(flat) // max(rows, 1)
    if change == "drop":
        return None
    if change == "string":
        return pa.array([str(v) for v in values.to_pylist()])
    if change == "null":
        return pa.nulls(rows, values.type)
    if change in ("wider", "narrower"):
        w = max(width + (1 if change == "wider" else -1), 0)
        return pa.array([[0.5] * w for _ in range(rows)], pa.list_(pa.float32()))
    new = flat.astype(np.float64)
    new = {"nan": np.full_like(new, np.nan), "inf": np.full_like(new, -np.inf), "negative": -1 - np.abs(new),
           "huge": np.full_like(new, 1e300)}.get(change, new)
    dtype = {"int8": np.int8, "float64": np.float64}.get(change, flat.dtype if flat.dtype.kind != "O" else np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        new = new.astype(dtype)
    if listy:
        return pa.FixedSizeListArray.from_arrays(pa.array(new), max(width, 1)) if width else pa.array(
            [[] for _ in range(rows)], pa.list_(pa.float32()))
    return pa.array(new)


@SHARED
@given(changes=st.dictionaries(COLUMNS, CHANGES, min_size=1, max_size=2),
       rows=st.sampled_from(["keep", "drop_last", "duplicate_first", "reverse"]))
@pytest.mark.slow
@example(changes={"frame_index": "negative"}, rows="keep")
@example(changes={"episode_index": "huge"}, rows="keep")
@example(changes={"observation.state": "nan"}, rows="keep")
@example(changes={"action": "wider"}, rows="drop_last")
@example(changes={"timestamp": "string"}, rows="duplicate_first")
@example(changes={"complementary_info.segment_source": "huge"}, rows="keep")
def test_lerobot_parquet_columns_hostile(lerobot: dict[str, Path], fuzz_work: Path, changes: dict[str, str],
                                         rows: str) -> None:
    src = fresh_copy(lerobot["dataset"], fuzz_work)
    path = src / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    n = table.num_rows
    take = {"keep": list(range(n)), "drop_last": list(range(n - 1)), "duplicate_first": [0, *range(n)],
            "reverse": list(range(n))[::-1]}[rows]
    table = table.take(take)
    for name, change in changes.items():
        if name in table.column_names:
            new = _changed(table.column(name), change, table.num_rows)
            i = table.column_names.index(name)
            table = table.remove_column(i) if new is None else table.set_column(i, name, new)
    pq.write_table(table, path)
    dest = lerobot_dest(lerobot, src.parent, False)
    check_import("import: lerobot parquet", lerobot_import(src, dest), src, dest)
