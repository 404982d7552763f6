"""Open-loop replay speed of sim-to-real alignment: batched (many envs, physics on C threads) vs a Python loop.

    .venv/bin/python benchmarks/alignment_replay.py [--robots cf2x g1 panda] [--segments 32]

Records a few motions on each robot's stand-in, then replays the same windows three ways, side by side in
one run: the Replayer batched over all segments with its physics on 2 threads (what sysid's candidates and
the evaluation use), the same one segment at a time on 1 thread, and one segment at a time with the env's
Python physics loop (the reference loop, no compiled kernels). Prints steps/s and the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from robot_rl.align.config import AlignConfig, CollectSettings
from robot_rl.align.episodes import collect, load_episodes, segments
from robot_rl.align.replay import Replayer

SETUPS = {
    "cf2x": ("robot_rl/QuadHover-v0", "robot_rl/QuadHover-RealStandIn-v0", 150),
    "g1": ("robot_rl/HumanoidWalk-v0", "robot_rl/HumanoidWalk-RealStandIn-v0", 150),
    "panda": ("robot_rl/ArmReach-v0", "robot_rl/ArmReach-RealStandIn-v0", 40),
}


def bench(robot: str, n_segments: int, folder: Path) -> None:
    """Print one robot's three rows."""
    env_id, real_id, steps = SETUPS[robot]
    cfg = AlignConfig(robot=robot, env_id=env_id, holdout_episodes=1,
                      collect=CollectSettings(env_id=real_id, episodes=6, steps=steps, excitation=0.02))
    store = collect(cfg, folder / f"{robot}.zarr", progress=False)
    probe = Replayer(cfg, 1)
    episodes = load_episodes(store, cfg, len(probe.low), 1.0 / probe.dt)
    h = round(1.0 / probe.dt)
    seg = segments(episodes, h, warmup=round(0.2 / probe.dt))
    seg = seg.take([i % len(seg) for i in range(n_segments)])
    probe.close()
    total = len(seg) * (seg.warmup + seg.horizon)
    rows = []
    for name, envs, nthread, compiled in (("batched, 2 threads", len(seg), 2, True),
                                          ("one at a time, 1 thread", 1, 1, True),
                                          ("Python physics loop", 1, 1, False)):
        replayer = Replayer(cfg, envs, nthread=nthread, compiled=compiled)
        replayer.replay(seg.take([0]))  # warm the kernels
        t0 = time.perf_counter()
        replayer.replay(seg)
        seconds = time.perf_counter() - t0
        replayer.close()
        rows.append((name, seconds))
    base = rows[-1][1]
    print(f"\n{robot}: {len(seg)} windows x {seg.warmup + seg.horizon} steps ({total} policy steps)")
    for name, seconds in rows:
        print(f"  {name:26s} {seconds:7.2f} s  {total / seconds:9.0f} steps/s  {base / seconds:5.1f}x the Python loop")


def main() -> None:
    """Parse arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--robots", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--segments", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for robot in args.robots:
            bench(robot, args.segments, Path(tmp))


if __name__ == "__main__":
    main()
