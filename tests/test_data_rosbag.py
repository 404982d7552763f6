"""rosbag2 import: real MCAP and sqlite3 bags written with rosbags, mapped by YAML, resampled with a tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.config import ConfigError, load_config
from robot_rl.data import DatasetError, EpisodeStore
from robot_rl.data.rosbag_import import BagMapping, import_bag

JOINTS = ["j1", "j2", "j3"]
MAPPING = """
fps: 10.0
tolerance_s: 0.06
task: pick the cube
robot: panda
observation:
  joint_pos: {topic: /joint_states, field: position, joints: [j3, j1]}
  wrist: {topic: /camera/image_raw}
action: {topic: /joint_command, field: position}
"""


def joint_value(t: float) -> np.ndarray:
    return np.array([np.sin(t), 2 * t, -t], dtype=np.float64)


def write_bag(path: Path, storage: str, gap: tuple[float, float] | None = None) -> None:
    """50 Hz joint states, 15 Hz bgr8 camera, 20 Hz commands over 3 s; camera silent during ``gap``."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    JointState, Image = ts.types["sensor_msgs/msg/JointState"], ts.types["sensor_msgs/msg/Image"]
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    t0 = 1_700_000_000.0

    def header(t: float) -> object:
        sec = int(t0 + t)
        return Header(stamp=Time(sec=sec, nanosec=round((t0 + t - sec) * 1e9)), frame_id="base")

    with Writer(path, version=9, storage_plugin=plugin) as writer:
        conns = {
            "/joint_states": writer.add_connection("/joint_states", JointState.__msgtype__, typestore=ts),
            "/camera/image_raw": writer.add_connection("/camera/image_raw", Image.__msgtype__, typestore=ts),
            "/joint_command": writer.add_connection("/joint_command", JointState.__msgtype__, typestore=ts),
        }
        events = [(i / 50, "/joint_states") for i in range(150)] + [(i / 15, "/camera/image_raw") for i in range(45)]
        events += [(i / 20 + 0.003, "/joint_command") for i in range(60)]
        for t, topic in sorted(events):
            if topic == "/joint_states":
                msg = JointState(header=header(t), name=JOINTS, position=joint_value(t),
                                 velocity=np.zeros(3), effort=np.zeros(3))
            elif topic == "/joint_command":
                msg = JointState(header=header(t), name=JOINTS, position=np.full(3, t), velocity=np.zeros(0),
                                 effort=np.zeros(0))
            else:
                if gap and gap[0] <= t < gap[1]:
                    continue
                bgr = np.zeros((6, 8, 3), np.uint8)
                bgr[..., 2] = round(t * 15)  # red channel encodes the frame number
                bgr[..., 0] = 7
                msg = Image(header=header(t), height=6, width=8, encoding="bgr8", is_bigendian=0, step=24,
                            data=bgr.reshape(-1))
            # received 2 ms after the stamp
            writer.write(conns[topic], int((t0 + t + 0.002) * 1e9), ts.serialize_cdr(msg, msg.__msgtype__))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_import_resamples_with_tolerance(tmp_path: Path, storage: str) -> None:
    bag = tmp_path / f"demo_{storage}"
    write_bag(bag, storage)
    cfg_path = tmp_path / "map.yaml"
    cfg_path.write_text(MAPPING)
    mapping = load_config(BagMapping, cfg_path)
    report = import_bag(bag, tmp_path / "d.zarr", mapping, progress=False)
    store = EpisodeStore.open(tmp_path / "d.zarr")
    assert store.num_episodes == 1 and report.episodes == [store.num_frames]
    assert store.info.fps == 10.0 and store.info.robot == "panda" and store.tasks == ["pick the cube"]
    steps = list(store.transitions(0))
    assert 25 <= len(steps) <= 29  # 3 s at 10 Hz, minus the start where the camera has not spoken yet
    t0 = 1_700_000_000.0
    for s in steps:
        t = s.obs_stamp - t0
        assert s.next_obs_stamp - s.obs_stamp == pytest.approx(0.1, abs=1e-6)
        # joint states (50 Hz) are held at most 20 ms; selected by name and reordered (j3, j1)
        held = round(np.floor((t + 1e-9) * 50)) / 50
        np.testing.assert_allclose(s.observation["joint_pos"], joint_value(held)[[2, 0]], atol=1e-5)
        assert t - held <= 0.06
        # camera (15 Hz) frame number and BGR -> RGB
        frame = int(np.floor((t + 1e-9) * 15))
        assert s.observation["wrist"].shape == (6, 8, 3)
        assert s.observation["wrist"][0, 0, 0] == frame and s.observation["wrist"][0, 0, 2] == 7
        # commands (20 Hz, 3 ms late) are held, never taken from the future
        cmd = float(s.action[0])
        assert -1e-5 <= t - cmd <= 0.06
    assert steps[-1].truncated and not any(s.terminated for s in steps)


def test_gap_longer_than_tolerance_splits_episode(tmp_path: Path) -> None:
    bag = tmp_path / "gap"
    write_bag(bag, "mcap", gap=(1.2, 1.6))
    mapping = load_config(BagMapping, {"fps": 10.0, "tolerance_s": 0.08, "observation": {
        "joint_pos": {"topic": "/joint_states", "field": "position"}, "wrist": {"topic": "/camera/image_raw"}}})
    report = import_bag(bag, tmp_path / "d.zarr", mapping, progress=False)
    store = EpisodeStore.open(tmp_path / "d.zarr")
    assert store.num_episodes == 2 and report.stale["observation.wrist"] >= 3
    for i in range(2):
        for s in store.transitions(i):
            t = s.obs_stamp - 1_700_000_000.0
            assert not 1.2 + 0.08 + 1e-3 < t < 1.6 - 1e-3, t  # no step holds a camera frame older than the tolerance
            assert s.action.shape == (1,)


def test_bad_mappings_and_bags_are_named(tmp_path: Path) -> None:
    bag = tmp_path / "b"
    write_bag(bag, "sqlite3")
    with pytest.raises(ConfigError, match=r"observation\.joint_pos\.: topic: must be an absolute topic name"):
        load_config(BagMapping, {"observation": {"joint_pos": {"topic": "joint_states"}}})
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(BagMapping, {"observation": {"q": {"topic": "/joint_states"}}, "fsp": 3})
    mapping = load_config(BagMapping, {"observation": {"q": {"topic": "/nope", "field": "position"}}})
    with pytest.raises(DatasetError, match=r"topic\(s\) \['/nope'\] not in the bag"):
        import_bag(bag, tmp_path / "x.zarr", mapping, progress=False)
    mapping = load_config(BagMapping, {"observation": {"q": {"topic": "/joint_states", "field": "position",
                                                             "joints": ["j9"]}}})
    with pytest.raises(DatasetError, match=r"feature q: joints \['j9'\] not in /joint_states"):
        import_bag(bag, tmp_path / "y.zarr", mapping, progress=False)
    mapping = load_config(BagMapping, {"observation": {"q": {"topic": "/joint_states", "field": "positon"}}})
    with pytest.raises(DatasetError, match="has no field 'positon'"):
        import_bag(bag, tmp_path / "z.zarr", mapping, progress=False)
    (tmp_path / "notabag").mkdir()
    with pytest.raises(DatasetError, match="cannot open as a rosbag2"):
        import_bag(tmp_path / "notabag", tmp_path / "w.zarr", mapping, progress=False)


def test_cli_import_bag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from robot_rl.cli.main import main

    bag = tmp_path / "demo"
    write_bag(bag, "mcap")
    (tmp_path / "map.yaml").write_text(MAPPING)
    args = ["data", "import", "bag", str(bag), "--out", str(tmp_path / "d.zarr"), "--no-progress"]
    assert main([*args, "--mapping", str(tmp_path / "map.yaml")]) == 0
    assert "imported 1 episode(s)" in capsys.readouterr().out
    assert EpisodeStore.open(tmp_path / "d.zarr").num_episodes == 1
    assert main([*args, "--mapping", str(tmp_path / "map.yaml")]) == 0  # a second bag appends
    assert EpisodeStore.open(tmp_path / "d.zarr").num_episodes == 2
    (tmp_path / "bad.yaml").write_text(MAPPING.replace("tolerance_s", "tolerence_s"))
    assert main([*args, "--mapping", str(tmp_path / "bad.yaml")]) == 1
    assert "unknown key(s) ['tolerence_s']" in capsys.readouterr().err
