"""Episode store throughput: frames/s written and read, bytes per frame, 1 vs 2 cameras at 224x224.

Also measures the LeRobot v3 export (AV1 video) of the same data, so the zarr store (lossless, random
access) and the exported videos (lossy, sequential) can be compared side by side in one run.

    .venv/bin/python benchmarks/data_throughput.py [--frames 600] [--noise 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.core.transition import Transition
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.lerobot_export import export_lerobot
from robot_rl.data.synthetic import synthetic_episode
from robot_rl.data.video import read_video

SIZE = 224
EPISODE = 100


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def noisy(episode: list[Transition], std: float, seed: int) -> list[Transition]:
    """The same episode with Gaussian pixel noise (a real camera's sensor noise; renders have none)."""
    rng = np.random.default_rng(seed)
    frames = [dict(t.observation) for t in episode] + [dict(episode[-1].next_observation)]
    for obs in frames:
        for key, value in obs.items():
            if value.dtype == np.uint8:
                obs[key] = np.clip(value + rng.normal(0, std, value.shape), 0, 255).astype(np.uint8)
    return [t.replace(observation=frames[i], next_observation=frames[i + 1]) for i, t in enumerate(episode)]


def run(cameras: int, frames: int, root: Path, noise: float) -> dict[str, float]:
    episodes = [synthetic_episode(i, EPISODE, cameras=cameras, size=SIZE) for i in range(frames // EPISODE)]
    if noise > 0:
        episodes = [noisy(ep, noise, i) for i, ep in enumerate(episodes)]
    path = root / f"cams{cameras}.zarr"
    t = time.perf_counter()
    with EpisodeStore.create(path, DatasetInfo(robot="panda", fps=10.0, task="bench")) as store:
        for ep in episodes:
            store.add_episode(ep)
    write_s = time.perf_counter() - t
    store = EpisodeStore.open(path)
    t = time.perf_counter()
    for i in range(store.num_episodes):
        store.read_episode(i)
    read_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    rows = rng.integers(0, store.num_frames, 200)
    cams = [store.array(f"observation.cam{c}") for c in range(cameras)]
    t = time.perf_counter()
    for r in rows:  # what a training sampler does: single frames at random
        for arr in cams:
            arr[int(r)]
    random_s = time.perf_counter() - t
    t = time.perf_counter()
    export_lerobot(store, root / f"lr{cameras}", progress=False)
    export_s = time.perf_counter() - t
    video = root / f"lr{cameras}" / "videos" / "observation.images.cam0" / "chunk-000" / "file-000.mp4"
    t = time.perf_counter()
    read_video(video, 10.0)
    decode_s = time.perf_counter() - t
    raw = SIZE * SIZE * 3 * cameras
    return {
        "write_fps": frames / write_s, "read_fps": frames / read_s, "random_fps": len(rows) / random_s,
        "store_bytes": folder_bytes(path) / frames, "raw_bytes": raw,
        "export_fps": frames / export_s, "export_bytes": folder_bytes(root / f"lr{cameras}") / frames,
        "decode_fps": frames / decode_s,
    }


def paced_latency(background: bool, root: Path, hz: float = 30.0, steps: int = 150) -> float:
    """Worst ``add()`` time in a 30 Hz loop with 2 cameras: what a control loop would feel.

    The very first ``add()`` of a new store creates its arrays (~0.1 s) and is left out.
    """
    episode = synthetic_episode(0, steps, cameras=2, size=SIZE)
    with EpisodeStore.create(root / f"paced{int(background)}.zarr", DatasetInfo(robot="panda", fps=hz)) as store:
        writer = store.begin_episode(background=background)
        worst, tick = 0.0, time.perf_counter()
        for i, t in enumerate(episode):
            start = time.perf_counter()
            writer.add(t)
            worst = max(worst, time.perf_counter() - start) if i else worst
            tick += 1.0 / hz
            time.sleep(max(0.0, tick - time.perf_counter()))
        writer.commit()
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=600, help="frames per configuration (multiple of 100)")
    parser.add_argument("--noise", type=float, default=0.0, help="pixel noise std (0: clean rendered images)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {c: run(c, args.frames, Path(tmp), args.noise) for c in (1, 2)}
        latency = {bg: paced_latency(bg, Path(tmp)) for bg in (False, True)}
    one, two = results[1], results[2]
    print(f"{args.frames} frames of {SIZE}x{SIZE} RGB per configuration, episodes of {EPISODE} steps, 1 process, "
          f"pixel noise std {args.noise}")
    print(f"{'':34s}{'1 camera':>12s}{'2 cameras':>12s}{'2 / 1':>8s}")
    rows = [
        ("store write [frames/s]", "write_fps"), ("store read, sequential [frames/s]", "read_fps"),
        ("store read, random frame [frames/s]", "random_fps"), ("raw bytes / frame", "raw_bytes"),
        ("store bytes / frame", "store_bytes"), ("LeRobot export [frames/s]", "export_fps"),
        ("LeRobot bytes / frame", "export_bytes"), ("video decode, 1 cam [frames/s]", "decode_fps"),
    ]
    for label, key in rows:
        print(f"{label:34s}{one[key]:12.0f}{two[key]:12.0f}{two[key] / one[key]:8.2f}")
    print(f"30 Hz loop, 2 cameras, worst add(): {latency[False] * 1e3:.1f} ms writing inline, "
          f"{latency[True] * 1e3:.1f} ms with the writer thread ({latency[False] / latency[True]:.0f}x lower)")
    for c, r in results.items():
        print(f"{c} camera(s): store compresses {r['raw_bytes'] / r['store_bytes']:.1f}x (lossless), "
              f"LeRobot export {r['raw_bytes'] / r['export_bytes']:.0f}x (AV1, lossy); "
              f"store/export size ratio {r['store_bytes'] / r['export_bytes']:.1f}")


if __name__ == "__main__":
    main()
