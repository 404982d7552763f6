"""Episodes shown in rerun (.rrd) and written as MCAP for Foxglove, read back with the tools' own readers."""

from __future__ import annotations

import dataclasses
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robot_rl.data.mcap_export import GAP_NS, episode_times, export_mcap
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.data.synthetic import synthetic_episode

rr = pytest.importorskip("rerun")
pytest.importorskip("mcap_ros2")

LENGTHS = (20, 25, 30)
SUCCESS = (True, False, None)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> EpisodeStore:
    path = tmp_path_factory.mktemp("view") / "pick.zarr"
    with EpisodeStore.create(path, DatasetInfo(robot="panda", fps=10.0, task="pick")) as s:
        for e, (n, ok) in enumerate(zip(LENGTHS, SUCCESS)):
            s.add_episode(synthetic_episode(e, n, cameras=2, size=32), success=ok)
    return EpisodeStore.open(path)


def rows(chunk: Any) -> list[dict[str, Any]]:
    """A chunk's rows; time columns as integer nanoseconds (what was logged, without datetime rounding)."""
    import pyarrow as pa

    batch = chunk.to_record_batch()
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) or pa.types.is_duration(c.type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names).to_pylist()


def read_rrd(path: Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Recording name -> entity path -> rows (dicts of columns), read with rerun's own RrdReader."""
    from rerun.chunk import RrdReader

    reader = RrdReader(path)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for entry in reader.recordings():
        entities: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for chunk in reader.stream(store=entry):
            entities[chunk.entity_path] += rows(chunk)
        name = next(r["RecordingInfo:name"][0] for r in entities["/__properties"] if "RecordingInfo:name" in r)
        out[name] = {k: sorted(v, key=lambda r: r.get("step", -1)) for k, v in entities.items()}
    return out


def scalars(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([r["Scalars:scalars"][0] for r in rows])


def test_rrd_holds_one_recording_per_episode_with_cameras_states_actions_and_interventions(store: EpisodeStore,
                                                                                         tmp_path: Path) -> None:
    from robot_rl.data.viewer import view_store

    report = view_store(store, episodes=[0, 2], rrd=tmp_path / "out.rrd", progress=False)
    assert report.frames == LENGTHS[0] + LENGTHS[2]
    recordings = read_rrd(tmp_path / "out.rrd")
    assert sorted(recordings) == ["episode 0", "episode 2"]
    for index in (0, 2):
        ents = recordings[f"episode {index}"]
        n = LENGTHS[index]
        cols = store.read_episode(index)
        assert {"/observation/cam0", "/observation/cam1", "/observation/gripper", "/reward", "/is_intervention",
                "/policy_version", "/episode"} <= set(ents)
        assert {f"/observation/joint_pos/{i}" for i in range(7)} | {f"/action/{i}" for i in range(8)} <= set(ents)
        frames = [r for r in ents["/observation/cam0"] if "Image:buffer" in r]
        assert [r["step"] for r in frames] == list(range(n))  # every step once, on the step timeline
        fmt = next(r["Image:format"][0] for r in ents["/observation/cam0"] if "Image:format" in r)
        assert (fmt["height"], fmt["width"]) == (32, 32)
        pixels = np.array(frames[7]["Image:buffer"][0], np.uint8)
        assert pixels.size == 32 * 32 * 3 and np.array_equal(pixels.reshape(32, 32, 3), cols["observation.cam0"][7])
        assert np.allclose(scalars(ents["/observation/joint_pos/3"]), cols["observation.joint_pos"][:, 3])
        human = scalars(ents["/is_intervention"])
        assert np.array_equal(human, cols["is_intervention"]) and human.any() and not human.all()
        # the human's steps have no policy proposal (NaN in the store): those rows are left out
        proposed = ents["/policy_action/0"]
        assert [r["step"] for r in proposed] == np.flatnonzero(~cols["is_intervention"]).tolist()
        seconds = [r["time"] / 1e9 for r in ents["/reward"]]
        assert np.allclose(seconds, cols["obs_stamp"] - cols["obs_stamp"][0])
        success = ents.get("/success", [])
        expected = SUCCESS[index]
        assert ([r["step"] for r in success], list(scalars(success))) == (
            ([], []) if expected is None else ([n - 1], [float(expected)]))


def test_rrd_frames_as_jpeg_decode_close_to_the_originals(store: EpisodeStore, tmp_path: Path) -> None:
    import cv2

    from robot_rl.data.viewer import view_store

    view_store(store, episodes=[1], rrd=tmp_path / "jpeg.rrd", jpeg_quality=95, progress=False)
    ents = read_rrd(tmp_path / "jpeg.rrd")["episode 1"]
    blobs = [r for r in ents["/observation/cam0"] if "EncodedImage:blob" in r]
    assert len(blobs) == LENGTHS[1] and blobs[0]["EncodedImage:media_type"] == ["image/jpeg"]
    decoded = cv2.imdecode(np.array(blobs[5]["EncodedImage:blob"][0], np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    original = store.read_episode(1, ["observation.cam0"])["observation.cam0"][5]
    assert decoded.shape == (32, 32, 3) and np.abs(decoded.astype(int) - original).mean() < 6


def read_mcap(path: Path) -> tuple[dict[str, str], list[tuple[str, int, Any]]]:
    """(topic -> schema name, [(topic, log time, decoded message)]) read with Foxglove's mcap + ROS 2 decoder."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with path.open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary is not None
        schemas = summary.schemas
        assert {s.encoding for s in schemas.values()} == {"ros2msg"}  # the .msg definitions are in the file
        assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
        types = {c.topic: schemas[c.schema_id].name for c in summary.channels.values()}
        messages = [(ch.topic, msg.log_time, dec) for _, ch, msg, dec in reader.iter_decoded_messages()]
    return types, messages


def test_mcap_has_standard_ros2_types_and_the_store_values(store: EpisodeStore, tmp_path: Path) -> None:
    report = export_mcap(store, tmp_path / "pick.mcap", progress=False)
    types, messages = read_mcap(tmp_path / "pick.mcap")
    assert types == {
        "/episode": "std_msgs/msg/String", "/observation/joint_pos": "sensor_msgs/msg/JointState",
        "/observation/gripper": "sensor_msgs/msg/JointState", "/observation/cam0/image_raw": "sensor_msgs/msg/Image",
        "/observation/cam1/image_raw": "sensor_msgs/msg/Image", "/action": "std_msgs/msg/Float64MultiArray",
        "/policy_action": "std_msgs/msg/Float64MultiArray", "/base_action": "std_msgs/msg/Float64MultiArray",
        "/reward": "std_msgs/msg/Float64", "/is_intervention": "std_msgs/msg/Bool",
        "/policy_version": "std_msgs/msg/Int64", "/success": "std_msgs/msg/Bool"}
    assert report.messages == len(messages)
    by_topic: dict[str, list[tuple[int, Any]]] = defaultdict(list)
    for topic, t, msg in messages:
        by_topic[topic].append((t, msg))
    starts = [t for t, _ in by_topic["/episode"]]
    assert starts == report.start_ns
    for index, n in enumerate(LENGTHS):
        lo, hi = starts[index], (starts[index + 1] if index + 1 < len(starts) else 2**63)
        cols = store.read_episode(index)
        images = [m for t, m in by_topic["/observation/cam0/image_raw"] if lo <= t < hi]
        assert len(images) == n  # frames per episode
        img = images[11]
        assert (img.height, img.width, img.encoding, img.step) == (32, 32, "rgb8", 96)
        assert np.array_equal(np.frombuffer(bytes(img.data), np.uint8).reshape(32, 32, 3),
                              cols["observation.cam0"][11])
        states = [m for t, m in by_topic["/observation/joint_pos"] if lo <= t < hi]
        assert states[4].name == [f"joint_pos.{i}" for i in range(7)]
        assert np.allclose(states[4].position, cols["observation.joint_pos"][4])
        flags = [m.data for t, m in by_topic["/is_intervention"] if lo <= t < hi]
        assert flags == cols["is_intervention"].tolist()
        stamp = states[4].header.stamp
        assert stamp.sec * 10**9 + stamp.nanosec == lo + round((cols["obs_stamp"][4] - cols["obs_stamp"][0]) * 1e9)
    assert [m.data for _, m in by_topic["/success"]] == [True, False]  # the third outcome is unknown
    # episodes one after another on one clock, a second apart (the stamps count from each episode's start)
    assert starts[1] == starts[0] + round(0.1 * (LENGTHS[0] - 1) * 1e9) + GAP_NS


def test_mcap_compressed_images_decode(store: EpisodeStore, tmp_path: Path) -> None:
    import cv2

    export_mcap(store, tmp_path / "jpeg.mcap", episodes=[2], jpeg_quality=95, progress=False)
    types, messages = read_mcap(tmp_path / "jpeg.mcap")
    assert types["/observation/cam1/compressed"] == "sensor_msgs/msg/CompressedImage"
    frames = [m for topic, _, m in messages if topic == "/observation/cam1/compressed"]
    assert len(frames) == LENGTHS[2] and frames[0].format == "jpeg"
    decoded = cv2.imdecode(np.frombuffer(bytes(frames[3].data), np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    original = store.read_episode(2, ["observation.cam1"])["observation.cam1"][3]
    assert np.abs(decoded.astype(int) - original).mean() < 6


def test_wall_clock_stamps_are_kept_and_relative_ones_laid_end_to_end() -> None:
    rel = np.arange(5) * 0.1
    assert episode_times(rel, 7).tolist() == [7 + k * 100_000_000 for k in range(5)]
    wall = 1.7e9 + rel
    assert episode_times(wall, 0)[0] == round(1.7e9 * 1e9)  # a bag's own times
    late = int(1.8e9 * 1e9)  # an earlier episode ended after these stamps: laid after it instead of overlapping
    assert episode_times(wall, late).tolist() == [late + k * 100_000_000 for k in range(5)]


def test_cli_writes_both_files_and_explains_bad_requests(store: EpisodeStore, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli.main import main

    rrd, mcap = tmp_path / "cli.rrd", tmp_path / "cli.mcap"
    assert main(["data", "view", str(store.path), "--episodes", "1", "--rrd", str(rrd), "--mcap", str(mcap),
                 "--no-progress"]) == 0
    assert list(read_rrd(rrd)) == ["episode 1"]
    _, messages = read_mcap(mcap)
    assert sum(topic == "/observation/cam0/image_raw" for topic, _, _ in messages) == LENGTHS[1]
    assert main(["data", "view", str(store.path), "--mcap", str(mcap)]) == 1  # never overwrites
    assert "already exists" in capsys.readouterr().err
    assert main(["data", "view", str(store.path), "--episodes", "7", "--rrd", str(tmp_path / "x.rrd")]) == 1
    assert "out of range" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main(["data", "view", str(store.path), "--jpeg", "0", "--rrd", str(tmp_path / "y.rrd")])
    assert "JPEG quality 1..100" in capsys.readouterr().err


def test_without_rerun_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch, store: EpisodeStore) -> None:
    from robot_rl.data.viewer import view_store

    monkeypatch.setitem(sys.modules, "rerun", None)
    with pytest.raises(ImportError, match=r"robot_rl\[viz\]"):
        view_store(store, rrd="unused.rrd")


def test_an_episode_with_absolute_stamps_gets_a_wall_clock_timeline(tmp_path: Path) -> None:
    from robot_rl.data.viewer import view_store

    steps = [dataclasses.replace(t, obs_stamp=1.7e9 + t.obs_stamp, next_obs_stamp=1.7e9 + t.next_obs_stamp)
             for t in synthetic_episode(0, 6, cameras=0)]
    with EpisodeStore.create(tmp_path / "bag.zarr", DatasetInfo(robot="panda")) as s:
        s.add_episode(steps)
    view_store(EpisodeStore.open(tmp_path / "bag.zarr"), rrd=tmp_path / "bag.rrd", progress=False)
    reward = read_rrd(tmp_path / "bag.rrd")["episode 0"]["/reward"]
    assert reward[2]["time"] / 1e9 == pytest.approx(1.7e9 + 0.2, abs=1e-5)
