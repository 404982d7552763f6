"""Property-based fuzzing of the dataset imports (rosbag2 MCAP / sqlite3, LeRobot v3) and the CLI's arguments.

Property of every hostile import: it either succeeds with valid content or raises a ValueError (DatasetError)
whose one-line message names the source, within a bounded time; the source files are left byte for byte as
they were, and a destination store that existed before is unchanged after a refused import (a refused
import into a new path leaves no store behind). CLI: every generated argument list ends with exit code
0, 1 or 2 and a one-line error (or argparse's usage), never a traceback and never a hang.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.fuzz import fresh_copy, fuzz_settings, tally
from hypothesis import example, given
from hypothesis import strategies as st

from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.lerobot_export import export_lerobot
from robot_rl.data.lerobot_import import import_lerobot
from robot_rl.data.rosbag_import import BagMapping, TopicField, import_bag
from robot_rl.data.synthetic import synthetic_episode

FUZZ = fuzz_settings(30)
SLOW_S = 20.0
"""Bound on one import (generous: the suite shares two cores with other test runs)."""
JOINTS = ["j1", "j2", "j3"]
T0 = 1_700_000_000


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (lock files aside: opening a store for append creates one)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".writer.lock"}


def check_import(entry: str, load: Callable[[], Any], src: Path, dest: Path) -> BaseException | None:
    """Run ``load``: a refusal is a one-line ValueError naming ``src``; ``src`` is never changed, nor is an
    existing ``dest`` by a refusal (a new ``dest`` is not left behind); an accepted store opens and is valid."""
    before_src, before_dest, existed = digest(src), digest(dest), dest.exists()
    error: BaseException | None = None
    start = time.monotonic()
    try:
        load()
    except ValueError as exc:
        error = exc
        assert "\n" not in str(exc), f"multi-line message: {exc!r}"
        assert str(src) in str(exc), f"{src} not named in {exc!r}"
    assert time.monotonic() - start < SLOW_S, "an import took too long"
    assert digest(src) == before_src, "an import changed its source files"
    if error is not None:
        assert digest(dest) == before_dest, "a refused import changed the destination"
        assert dest.exists() == existed, "a refused import left a new store behind"
    else:
        from robot_rl.data.validate import validate_store

        report = validate_store(dest)
        assert report.ok, f"an accepted import is not valid: {report.issues}"
    tally(entry, "accepted" if error is None else f"refused: {type(error).__name__}")
    return error


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)




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
def bags(work: Path) -> dict[str, Path]:
    out = {}
    for storage in ("mcap", "sqlite3"):
        write_bag(work / f"bag_{storage}", storage)
        out[storage] = work / f"bag_{storage}"
    import_bag(out["mcap"], work / "bag_store.zarr", MAPPING, progress=False)
    out["store"] = work / "bag_store.zarr"
    return out


def bag_dest(bags: dict[str, Path], folder: Path, existing: bool) -> Path:
    if existing:
        shutil.copytree(bags["store"], folder / "dest.zarr")
    return folder / "dest.zarr"


@FUZZ
@given(storage=st.sampled_from(["mcap", "sqlite3"]), target=st.sampled_from(["storage", "metadata.yaml"]),
       cut=CUTS, flips=FLIPS, existing=st.booleans())
@example(storage="mcap", target="storage", cut=100, flips=[], existing=True)
@example(storage="sqlite3", target="storage", cut=0, flips=[(5000, 3)], existing=False)
@example(storage="mcap", target="metadata.yaml", cut=40, flips=[], existing=False)
def test_rosbag_file_truncated_or_flipped(bags: dict[str, Path], work: Path, storage: str, target: str, cut: int,
                                         flips: list[tuple[int, int]], existing: bool) -> None:
    bag = fresh_copy(bags[storage], work)
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


@FUZZ
@given(storage=st.sampled_from(["mcap", "sqlite3"]), hostile=HOSTILE, mapping=MAPPINGS, existing=st.booleans())
@example(storage="mcap", hostile={"joint_values": [float("nan")]}, mapping={}, existing=True)
@example(storage="mcap", hostile={"joint_values": [1e308]}, mapping={}, existing=False)
@example(storage="mcap", hostile={"stamp_sec": 2**31 - 1, "stamps_backwards": True}, mapping={}, existing=False)
@example(storage="mcap", hostile={}, mapping={"fps": 1e300}, existing=False)
@example(storage="mcap", hostile={}, mapping={"fps": 1e-3, "tolerance_s": 1e9}, existing=False)  # 10**6 steps
@example(storage="sqlite3", hostile={"image": {"height": 2**31, "step": 12}}, mapping={}, existing=True)
@example(storage="mcap", hostile={"image": {"height": 0}}, mapping={}, existing=True)
@example(storage="mcap", hostile={"string_on": "/joint_states"}, mapping={}, existing=False)
@example(storage="mcap", hostile={"joint_len_changes": True}, mapping={}, existing=False)
@example(storage="mcap", hostile={"names": ["j3", "j3", "j1"]}, mapping={"field": "name"}, existing=False)
def test_rosbag_hostile_messages_and_mappings(bags: dict[str, Path], work: Path, storage: str,
                                              hostile: dict[str, Any], mapping: dict[str, Any],
                                              existing: bool) -> None:
    folder = Path(tempfile.mkdtemp(dir=work))
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
def lerobot(work: Path) -> dict[str, Path]:
    store = EpisodeStore.create(work / "lr_src.zarr", DatasetInfo(robot="panda", fps=10.0, task="pick"))
    for i, n in enumerate((5, 3)):
        store.add_episode(synthetic_episode(i, n, cameras=1, size=32, joints=3), task="pick")
    store.close()
    export_lerobot(EpisodeStore.open(work / "lr_src.zarr"), work / "lr", progress=False)
    import_lerobot(work / "lr", work / "lr_back.zarr", progress=False).close()
    return {"dataset": work / "lr", "store": work / "lr_back.zarr"}


def lerobot_import(src: Path, dest: Path) -> Callable[[], None]:
    return lambda: import_lerobot(src, dest, progress=False).close()


def lerobot_dest(lerobot: dict[str, Path], folder: Path, existing: bool) -> Path:
    if existing:  # import never appends: an existing store must be refused and left as it was
        shutil.copytree(lerobot["store"], folder / "dest.zarr")
    return folder / "dest.zarr"


LEROBOT_FILES = ["meta/info.json", "meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet",
                 "data/chunk-000/file-000.parquet", "meta/robot_rl.json", "meta/stats.json",
                 "videos/observation.images.cam0/chunk-000/file-000.mp4"]


@FUZZ
@given(name=st.sampled_from(LEROBOT_FILES), cut=CUTS, flips=FLIPS, delete=st.booleans(), existing=st.booleans())
@example(name="data/chunk-000/file-000.parquet", cut=200, flips=[], delete=False, existing=False)
@example(name="videos/observation.images.cam0/chunk-000/file-000.mp4", cut=0, flips=[], delete=True,
         existing=False)
@example(name="videos/observation.images.cam0/chunk-000/file-000.mp4", cut=300, flips=[], delete=False,
         existing=False)
@example(name="meta/episodes/chunk-000/file-000.parquet", cut=0, flips=[(99, 1)], delete=False, existing=True)
def test_lerobot_file_truncated_flipped_or_missing(lerobot: dict[str, Path], work: Path, name: str, cut: int,
                                                   flips: list[tuple[int, int]], delete: bool,
                                                   existing: bool) -> None:
    src = fresh_copy(lerobot["dataset"], work)
    file = src / name
    if delete:
        file.unlink()
    else:
        file.write_bytes(mutate(file.read_bytes(), cut, flips))
    dest = lerobot_dest(lerobot, src.parent, existing)
    entry = "import: lerobot videos" if name.endswith(".mp4") else "import: lerobot parquet"
    error = check_import(entry, lerobot_import(src, dest), src, dest)
    assert error is not None or not existing, "an import overwrote an existing store"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8)
INFO_KEYS = st.sampled_from(["codebase_version", "fps", "features", "data_path", "video_path", "robot_type",
                             "total_episodes", "chunks_size"])
FEATURE_KEYS = st.sampled_from(["observation.state", "action", "observation.images.cam0", "timestamp",
                                "observation.extra"])
FEATURE_FIELDS = st.sampled_from(["dtype", "shape", "names", "info"])


@FUZZ
@given(top=st.dictionaries(INFO_KEYS, JSON_VALUES, max_size=2), feature=FEATURE_KEYS,
       fields=st.dictionaries(FEATURE_FIELDS, JSON_VALUES | st.sampled_from(["video", "image", "float32",
                                                                              [2], [10**9]]), max_size=2),
       drop=st.lists(INFO_KEYS | FEATURE_KEYS, max_size=2), raw=st.none() | st.binary(max_size=40))
@example(top={"fps": 0}, feature="action", fields={}, drop=[], raw=None)
@example(top={"fps": "ten"}, feature="action", fields={}, drop=[], raw=None)
@example(top={"features": []}, feature="action", fields={}, drop=[], raw=None)
@example(top={"data_path": "{nope}"}, feature="action", fields={}, drop=[], raw=None)
@example(top={"data_path": "../../../etc/passwd"}, feature="action", fields={}, drop=[], raw=None)
@example(top={}, feature="observation.state", fields={"shape": [10**9]}, drop=[], raw=None)
@example(top={}, feature="observation.images.cam0", fields={"dtype": "image"}, drop=[], raw=None)
@example(top={}, feature="action", fields={}, drop=["fps", "observation.images.cam0"], raw=None)
@example(top={}, feature="action", fields={}, drop=[], raw=b"[]")
def test_lerobot_info_json_hostile(lerobot: dict[str, Path], work: Path, top: dict[str, Any], feature: str,
                                   fields: dict[str, Any], drop: list[str], raw: bytes | None) -> None:
    src = fresh_copy(lerobot["dataset"], work)
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
    check_import("import: lerobot parquet", lerobot_import(src, dest), src, dest)


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


@FUZZ
@given(changes=st.dictionaries(COLUMNS, CHANGES, min_size=1, max_size=2),
       rows=st.sampled_from(["keep", "drop_last", "duplicate_first", "reverse"]))
@example(changes={"frame_index": "negative"}, rows="keep")
@example(changes={"episode_index": "huge"}, rows="keep")
@example(changes={"observation.state": "nan"}, rows="keep")
@example(changes={"action": "wider"}, rows="drop_last")
@example(changes={"timestamp": "string"}, rows="duplicate_first")
@example(changes={"complementary_info.segment_source": "huge"}, rows="keep")
def test_lerobot_parquet_columns_hostile(lerobot: dict[str, Path], work: Path, changes: dict[str, str],
                                         rows: str) -> None:
    src = fresh_copy(lerobot["dataset"], work)
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


# ===================================================================================== CLI arguments
CLI_ENTRY = "cli: arguments"
NUMBERS = st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e999", "99999999999999999999", "0x10", "1.5",
                           "", "abc", "-0", "3,1", "1,,x"])
BAD_ENVS = st.sampled_from(["", "robot_rl/Nope-v0", "nope", "robot_rl/ArmReach-v9", "gymnasium:x", "-", "a" * 300,
                            "robot_rl/ArmReach-v0:", "nope.module:Env-v0"])
TEXT = st.sampled_from(["", "-", "--", "x=y", "=", "a b", "\u00e9\u2028", "{", "[1, 2", "policy_hz=", "policy_hz=-1",
                        "policy_hz=nan", "randomization={", "nope=1", "data.fps=1e999"]) | st.text(max_size=8)


@pytest.fixture(scope="module")
def sandbox(work: Path, lerobot: dict[str, Path]) -> dict[str, str]:
    """Hostile paths: missing, too long, garbage files, an empty folder, a tiny valid store, a LeRobot folder."""
    root = work / "cli"
    root.mkdir()
    (root / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (root / "bad.yaml").write_text("a: [1, 2\n")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "keys.yaml").write_text("nope: 1\nlr: 1e999\nsteps: -5\n")
    (root / "empty.txt").write_text("")
    (root / "folder").mkdir()
    return {"missing": str(root / "missing" / "x"), "long": str(root / ("n" * 300)),
            "garbage": str(root / "garbage.bin"), "bad_yaml": str(root / "bad.yaml"),
            "list_yaml": str(root / "list.yaml"), "keys_yaml": str(root / "keys.yaml"),
            "empty": str(root / "empty.txt"), "folder": str(root / "folder"), "store": str(lerobot["store"]),
            "lerobot": str(lerobot["dataset"]), "unicode": str(root / "\u00e9\u2028\U0001f600")}


@st.composite
def cli_args(draw: st.DrawFn, paths: dict[str, str]) -> list[str]:
    """One argument list for a subcommand that fails fast (no training, recording or rollout can start)."""
    path = st.sampled_from(sorted(paths.values()))
    bad = st.sampled_from([v for k, v in sorted(paths.items()) if k not in ("store", "lerobot")])
    new = st.integers(0, 10**6).map(lambda i: str(Path(paths["folder"]) / f"new{i}"))
    out = new | bad
    opt = draw(st.lists(st.sampled_from(["--json", "--no-progress", "--bogus", "--", "-x", "--out=", "-h"]),
                        max_size=1))
    kind = draw(st.sampled_from(["data info", "data validate", "data stats", "data plot", "data export",
                                 "data import", "data record", "train", "eval", "sim rollout", "sim", "rl train",
                                 "online status", "online run", "align", "launch", "top", "nonsense"]))
    a: list[str]
    if kind in ("data info", "data validate"):
        a = [*kind.split(), draw(path)]
    elif kind == "data stats":
        a = ["data", "stats", draw(path), "--out", draw(out)]
    elif kind == "data plot":
        a = ["data", "plot", draw(path), "--out", draw(out), "--episodes", draw(NUMBERS)]
    elif kind == "data export":
        a = ["data", "export", draw(path), "--out", draw(new), "--episodes", draw(NUMBERS),
             *draw(st.sampled_from([[], ["--encoder", "nope"], ["--encoder", ""]]))]
    elif kind == "data import":
        a = ["data", "import", draw(st.sampled_from(["lerobot", "bag", "zarr"])), draw(path), "--out", draw(out),
             *draw(st.sampled_from([[], ["--mapping", draw(path)]]))]
    elif kind == "data record":
        a = ["data", "record", "--out", draw(new), "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS),
             "--override", draw(TEXT), *draw(st.sampled_from([[], ["--import", draw(TEXT)],
                                                              ["--noise-dims", draw(NUMBERS)]]))]
    elif kind == "train":
        a = ["train", draw(bad), "--out", draw(out), "--set", draw(TEXT),
             *draw(st.sampled_from([[], ["--dataset", draw(path)], ["--device", draw(TEXT)]]))]
    elif kind == "eval":
        a = ["eval", draw(bad), "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS), "--workers", draw(NUMBERS)]
    elif kind == "sim rollout":
        a = ["sim", "rollout", "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS), "--seed", draw(NUMBERS),
             "--override", draw(TEXT)]
    elif kind == "sim":
        a = ["sim", *draw(st.sampled_from([[], ["list"], ["nope"]]))]
    elif kind == "rl train":
        a = ["rl", "train", draw(bad), "--out", draw(out), "--set", draw(TEXT)]
    elif kind == "online status":
        a = ["online", "status", draw(path)]
    elif kind == "online run":  # a config that never loads: an empty --config would start the default run
        a = ["online", "run", "--config", draw(bad.filter(bool)), "--run", draw(out), "--seconds", draw(NUMBERS)]
    elif kind == "align":
        a = ["align", draw(st.sampled_from(["collect", "gap", "fit", "eval", "finetune", "nope"])), "--config",
             draw(bad), "--run", draw(out)]
    elif kind == "launch":  # --print: resolve the file only, start nothing
        a = ["launch", draw(bad), "--print", *draw(st.lists(TEXT, max_size=2))]
    elif kind == "top":
        a = draw(st.sampled_from([[], ["--version"], ["--help"], ["-h"], ["--bogus"]]))
    else:
        a = [draw(TEXT)]
    return [*a, *opt]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``robot-rl argv`` in process: its exit code and everything it printed; raises on a hang."""
    import contextlib
    import io
    import signal

    from robot_rl.cli.main import main

    def hang(*_: Any) -> None:
        raise TimeoutError(f"robot-rl {argv} hung")

    buffer = io.StringIO()
    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, SLOW_S)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            try:
                code: int | str | None = main(argv)
            except SystemExit as exc:  # argparse (usage: 2, --help: 0) or a SystemExit("error: ...") (1)
                code = exc.code
                if isinstance(code, str):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return int(code or 0), buffer.getvalue()


FOUND = [["data", "info", "{long}"], ["data", "record", "--out", "{missing}", "--env", ""],
         ["data", "record", "--out", "{missing}", "--import", ""], ["data", "plot", "{store}", "--out", "{missing}",
                                                                     "--episodes", "nan"],
         ["launch", "{garbage}", "--print"], ["launch", "{bad_yaml}", "--print"], ["launch", "{folder}", "--print"],
         ["data", "export", "{store}", "--out", "{missing}", "--encoder", "nope"],
         ["sim", "rollout", "--env", "nope", "--override", "randomization={{"]]
"""Inputs that once raised a traceback (in the order found)."""


@fuzz_settings(150)
@given(data=st.data())
@example(data=None)
def test_cli_hostile_arguments_fail_cleanly(sandbox: dict[str, str], data: st.DataObject | None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(sandbox["folder"]))  # a relative or empty path never touches the repository
    if data is None:
        for argv in FOUND:
            check_cli([a.format(**sandbox) for a in argv], sandbox)
        return
    check_cli(data.draw(cli_args(sandbox), label="argv"), sandbox)


def check_cli(argv: list[str], sandbox: dict[str, str]) -> None:
    before = digest(Path(sandbox["store"])) | digest(Path(sandbox["lerobot"]))
    code, output = run_cli(argv)
    assert "Traceback" not in output, output
    assert code in (0, 1, 2), (code, output)
    lines = [line for line in output.splitlines() if line.strip()]
    if code and not any(line.startswith("usage:") for line in lines):
        errors = [line for line in lines if any(w in line.lower() for w in ("error", "issue", "stopped"))]
        assert errors, f"exit {code} without an error line: {output!r}"
    assert digest(Path(sandbox["store"])) | digest(Path(sandbox["lerobot"])) == before, "the CLI changed an input"
    tally(CLI_ENTRY, "accepted" if code == 0 else f"refused: exit {code}")
