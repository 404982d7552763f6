"""LeRobot v3.0 export and import: layout, feature names, stats, round trip, and LeRobot's own loader."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from robot_rl.data import DatasetError, DatasetInfo, EpisodeStore
from robot_rl.data.lerobot_export import export_lerobot
from robot_rl.data.lerobot_import import import_lerobot
from robot_rl.data.synthetic import synthetic_episode
from robot_rl.data.video import read_video

LENGTHS = (30, 21, 12)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lerobot")
    store = EpisodeStore.create(root / "src.zarr", DatasetInfo(robot="panda", fps=10.0, task="pick",
                                                                controller={"type": "osc"}))
    for i, n in enumerate(LENGTHS):
        if i == 1:  # a take thrown away before episode 1 must not leak into the videos (LeRobot #4109)
            writer = store.begin_episode()
            for t in synthetic_episode(1, 40, cameras=2, size=96, seed=5):
                writer.add(t)
            writer.discard()
        store.add_episode(synthetic_episode(i, n, cameras=2, size=96), task="pick" if i != 1 else "place")
    store.close()
    export_lerobot(EpisodeStore.open(root / "src.zarr"), root / "lr", progress=False)
    return root / "src.zarr", root / "lr"


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(255.0**2 / np.mean((a.astype(np.float64) - b) ** 2)))


def test_layout_and_feature_names(exported: tuple[Path, Path]) -> None:
    _, lr = exported
    info = json.loads((lr / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10 and info["robot_type"] == "panda"
    assert info["total_episodes"] == 3 and info["total_frames"] == sum(LENGTHS) and info["total_tasks"] == 2
    feats = info["features"]
    for name in ("observation.state", "observation.images.cam0", "observation.images.cam1", "action", "next.reward",
                 "next.done", "complementary_info.is_intervention", "timestamp", "frame_index", "episode_index",
                 "index", "task_index"):
        assert name in feats, name
    assert feats["observation.state"]["names"][:2] == ["joint_pos.0", "joint_pos.1"]
    assert feats["observation.images.cam0"]["dtype"] == "video"
    for cam in ("cam0", "cam1"):  # exactly the committed frames, nothing from the discarded take
        assert len(read_video(lr / f"videos/observation.images.{cam}/chunk-000/file-000.mp4", 10.0)) == sum(LENGTHS)
    data = pq.read_table(lr / "data/chunk-000/file-000.parquet")
    assert data.num_rows == sum(LENGTHS)
    assert data.column("index").to_pylist() == list(range(sum(LENGTHS)))
    done = np.asarray(data.column("next.done").to_pylist())
    assert np.flatnonzero(done).tolist() == list(np.cumsum(LENGTHS) - 1)
    episodes = pq.read_table(lr / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["dataset_to_index"] for e in episodes] == list(np.cumsum(LENGTHS))
    assert episodes[1]["videos/observation.images.cam0/from_timestamp"] == pytest.approx(3.0)
    assert episodes[1]["tasks"] == ["place"]
    tasks = pq.read_table(lr / "meta/tasks.parquet").to_pylist()
    assert tasks == [{"task_index": 0, "task": "pick"}, {"task_index": 1, "task": "place"}]
    stats = json.loads((lr / "meta" / "stats.json").read_text())
    state = np.stack(data.column("observation.state").to_pylist())
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(axis=0), rtol=1e-5, atol=1e-6)
    assert np.array(stats["observation.images.cam0"]["mean"]).shape == (3, 1, 1)


def test_round_trip_through_lerobot_format(exported: tuple[Path, Path], tmp_path: Path) -> None:
    src, lr = exported
    back = import_lerobot(lr, tmp_path / "back.zarr", progress=False)
    orig = EpisodeStore.open(src)
    assert back.num_episodes == 3 and back.tasks == ["pick", "place"]
    assert back.info.controller == {"type": "osc"}
    for i in range(3):
        a, b = list(orig.transitions(i)), list(back.transitions(i))
        assert len(a) == len(b) == LENGTHS[i]
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.observation["joint_pos"], y.observation["joint_pos"])
            np.testing.assert_array_equal(x.action, y.action)
            assert (x.policy_action is None) == (y.policy_action is None)
            assert (x.reward, x.terminated, x.truncated, x.is_intervention, x.segment_source, x.obs_stamp) == \
                   (y.reward, y.terminated, y.truncated, y.is_intervention, y.segment_source, y.obs_stamp)
            assert psnr(y.observation["cam1"], x.observation["cam1"]) > 24.0  # lossy video, same frame
        # frame order is right: each decoded frame is closest to its own original
        frames = np.stack([y.observation["cam0"] for y in b]).astype(np.float64)
        origs = np.stack([x.observation["cam0"] for x in a]).astype(np.float64)
        dist = ((frames[:, None] - origs[None]) ** 2).mean(axis=(2, 3, 4))
        assert np.all(dist.argmin(axis=1) == np.arange(len(a)))


def test_export_refuses_to_overwrite_and_import_reports_bad_input(exported: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    src, lr = exported
    with pytest.raises(DatasetError, match="not empty"):
        export_lerobot(EpisodeStore.open(src), lr, progress=False)
    broken = tmp_path / "broken"
    (broken / "meta").mkdir(parents=True)
    (broken / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 10, "features": {}}))
    with pytest.raises(DatasetError, match="not v3"):
        import_lerobot(broken, tmp_path / "x.zarr", progress=False)
    (broken / "meta" / "info.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        import_lerobot(broken, tmp_path / "y.zarr", progress=False)


LOADER = """
import json, sys, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("local/robot_rl", root=sys.argv[1])
out = {"episodes": ds.num_episodes, "frames": ds.num_frames, "cameras": ds.meta.camera_keys}
items = [ds[i] for i in (0, 31, len(ds) - 1)]
out["state"] = [it["observation.state"].tolist() for it in items]
out["task"] = [it["task"] for it in items]
out["intervention"] = [bool(ds[i]["complementary_info.is_intervention"]) for i in range(30)]
np.save(sys.argv[2], np.stack([(it["observation.images.cam1"].numpy() * 255).round() for it in items]))
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.environ.get("ROBOT_RL_LEROBOT_PYTHON"),
                    reason="set ROBOT_RL_LEROBOT_PYTHON to a Python with lerobot>=0.4 to run its loader")
def test_lerobot_own_loader_accepts_export(exported: tuple[Path, Path], tmp_path: Path) -> None:
    src, lr = exported
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([os.environ["ROBOT_RL_LEROBOT_PYTHON"], "-c", LOADER, str(lr), str(tmp_path / "img.npy")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["episodes"] == 3 and out["frames"] == sum(LENGTHS)
    assert out["cameras"] == ["observation.images.cam0", "observation.images.cam1"]
    assert out["task"] == ["pick", "place", "pick"]
    orig = EpisodeStore.open(src)
    rows = [(0, 0), (1, 1), (2, LENGTHS[2] - 1)]
    tr = [list(orig.transitions(ep))[i] for ep, i in rows]
    for got, t in zip(out["state"], tr):
        np.testing.assert_allclose(got, np.concatenate([t.observation["joint_pos"], t.observation["gripper"]]))
    assert out["intervention"] == [t.is_intervention for t in orig.transitions(0)]
    images = np.load(tmp_path / "img.npy").transpose(0, 2, 3, 1)
    for img, t in zip(images, tr):
        assert psnr(img, t.observation["cam1"]) > 24.0


WRITER = """
import sys, numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
feats = {
    "observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
    "observation.images.top": {"dtype": sys.argv[2], "shape": (64, 64, 3), "names": ["height", "width", "channels"]},
    "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
    "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    "complementary_info.is_intervention": {"dtype": "bool", "shape": (1,), "names": None},
}
ds = LeRobotDataset.create("local/theirs", fps=15, features=feats, root=sys.argv[1], robot_type="so101",
                           use_videos=sys.argv[2] == "video")
for e in range(2):
    for i in range(6 + e):
        ds.add_frame({"observation.state": np.full(3, 10 * e + i, np.float32),
                      "observation.images.top": np.full((64, 64, 3), 30 * i, np.uint8),
                      "action": np.array([i, -i], np.float32), "next.reward": np.array([float(i == 5 + e)], np.float32),
                      "next.done": np.array([i == 5 + e]), "complementary_info.is_intervention": np.array([i == 2]),
                      "task": f"task {e}"})
    ds.save_episode()
ds.finalize()
"""


@pytest.mark.skipif(not os.environ.get("ROBOT_RL_LEROBOT_PYTHON"),
                    reason="set ROBOT_RL_LEROBOT_PYTHON to a Python with lerobot>=0.4 to write its datasets")
@pytest.mark.parametrize("dtype", ["video", "image"])
def test_import_dataset_written_by_lerobot(tmp_path: Path, dtype: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([os.environ["ROBOT_RL_LEROBOT_PYTHON"], "-c", WRITER, str(tmp_path / "theirs"), dtype],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = import_lerobot(tmp_path / "theirs", tmp_path / "ours.zarr", progress=False)
    assert store.num_episodes == 2 and store.tasks == ["task 0", "task 1"] and store.info.robot == "so101"
    assert store.info.fps == 15.0
    steps = list(store.transitions(1))
    assert len(steps) == 7
    for i, s in enumerate(steps):
        np.testing.assert_array_equal(s.observation["state"], np.full(3, 10 + i, np.float32))
        np.testing.assert_array_equal(s.action, [i, -i])
        tolerance = 4 if dtype == "video" else 0  # lossy video / lossless PNG inside the parquet
        assert abs(int(s.observation["top"][10, 10, 0]) - 30 * i) <= tolerance
        assert s.is_intervention == (i == 2) and s.obs_stamp == pytest.approx(i / 15, abs=1e-6)
    assert steps[-1].terminated and steps[-1].reward == 1.0


NATIVE = """
import sys
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/tests"]
from robot_rl.data import DatasetInfo, EpisodeStore
from helpers.lerobot_native import export_with_lerobot
from robot_rl.data.synthetic import synthetic_episode
from lerobot.datasets.lerobot_dataset import LeRobotDataset
store = EpisodeStore.create(sys.argv[1] + "/s.zarr", DatasetInfo(robot="panda", fps=10.0, task="pick"))
for i in range(2):
    store.add_episode(synthetic_episode(i, 20 + i, cameras=1, size=64))
export_with_lerobot(store, sys.argv[1] + "/lr", progress=False)
ds = LeRobotDataset("local/robot_rl", root=sys.argv[1] + "/lr")
item = ds[25]
print(ds.num_episodes, ds.num_frames, int(item["episode_index"]), int(item["frame_index"]),
      bool(item["complementary_info.is_intervention"]))
"""


def test_native_lerobot_api_export(tmp_path: Path) -> None:
    python = os.environ.get("ROBOT_RL_LEROBOT_PYTHON")
    if not python or subprocess.run([python, "-c", "import zarr, yaml, lerobot"], capture_output=True).returncode:
        pytest.skip("set ROBOT_RL_LEROBOT_PYTHON to a Python with lerobot and zarr to use LeRobot's own API")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([python, "-c", NATIVE, str(tmp_path), repo], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    episodes, frames, ep, frame, intervention = proc.stdout.split()[-5:]
    assert (episodes, frames, ep, frame) == ("2", "41", "1", "5")
    assert intervention == str(synthetic_episode(1, 21)[5].is_intervention)
