"""Training steps per second of the demo's flow policy on the CPU and, when present, on CUDA, in one run.

The policy and optimiser settings come from config/policies/flow_pick_lift.yaml (U-Net 32/64, 2
observation steps, 16-step chunks, batch 64, EMA, warm-up + cosine); the data is a synthetic episode
store of the pick-and-lift shapes (32 state features, 7-D actions, 100 episodes of 80 steps), because a
step's cost does not depend on the values. Each device runs the real training loop
(``robot_rl.training.loop.train``); the rate is taken between its first and last log line, so start-up,
the first CUDA kernels and the final checkpoint are left out.

    .venv/bin/python benchmarks/train_step_device.py [--steps 300] [--batch-size 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.core.config import load_config
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.loop import TrainConfig, train

STATE_DIM, ACTION_DIM, EPISODES, LENGTH = 32, 7, 100, 80
CONFIG = Path(__file__).resolve().parents[1] / "config" / "policies" / "flow_pick_lift.yaml"


def synthetic_dataset(cfg: TrainConfig, seed: int = 0) -> ChunkDataset:
    """Random states and smooth random actions with the pick-and-lift shapes."""
    rng = np.random.default_rng(seed)
    n = EPISODES * LENGTH
    pcfg = cfg.policy_config()
    actions = np.cumsum(rng.normal(0, 0.1, (n, ACTION_DIM)), axis=0).astype(np.float32)
    return ChunkDataset({"state": rng.normal(size=(n, STATE_DIM)).astype(np.float32)}, actions,
                        np.arange(1, EPISODES + 1) * LENGTH, ["pick up the cube"] * EPISODES, [],
                        pcfg.n_obs_steps, pcfg.horizon)


def steps_per_second(cfg: TrainConfig, dataset: ChunkDataset) -> float:
    """Run the training loop; optimizer steps per second between its first and last log line."""
    marks: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, Path(tmp) / "run", dataset=dataset, progress=False,
              log=lambda step, _: marks.append((step, time.perf_counter())))
    (s0, t0), (s1, t1) = marks[0], marks[-1]
    return (s1 - s0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per device")
    parser.add_argument("--batch-size", type=int, default=None, help="windows per step (default: the config's)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    overrides = [f"steps={args.steps}", f"log_every={max(1, args.steps // 10)}",
                 f"checkpoint_every={args.steps}", f"num_threads={args.threads}"]
    if args.batch_size:
        overrides.append(f"batch_size={args.batch_size}")
    base = load_config(TrainConfig, CONFIG, overrides)
    dataset = synthetic_dataset(base)
    print(f"flow policy (config/policies/flow_pick_lift.yaml): U-Net {list(base.policy['unet_channels'])}, "
          f"batch {base.batch_size}, {args.steps} steps per device, torch {torch.__version__}, "
          f"{args.threads} CPU thread(s)")
    rows = [("cpu", steps_per_second(dataclasses.replace(base, device="cpu"), dataset))]
    if torch.cuda.is_available():
        rows.append((f"cuda ({torch.cuda.get_device_name()})",
                     steps_per_second(dataclasses.replace(base, device="cuda"), dataset)))
    print(f"{'device':<40} {'steps/s':>10} {'ms/step':>10} {'vs cpu':>8}")
    for name, rate in rows:
        print(f"{name:<40} {rate:>10.1f} {1000 / rate:>10.2f} {rate / rows[0][1]:>7.1f}x")
    if len(rows) == 1:
        print("no CUDA device: GPU row skipped")


if __name__ == "__main__":
    main()
