"""Batched env steps/s: CPU threads vs MuJoCo Warp (CUDA when present, else Warp's CPU fallback).

Quadrotor: the same env (robot_rl.sim.batched_quad.BatchedQuadHover, numpy body-rate loop, 10 physics
steps per env step), only the physics behind it changes; ratios to mujoco.batch with 2 threads and the
same number of drones. G1 (HumanoidWalk-v0, 10 physics steps per env step): WarpVectorEnv against
ThreadedVectorEnv on 2 threads, same number of envs. All measured in the same run:

    .venv/bin/python benchmarks/batched_physics.py [--seconds 3] [--drones 64 256 1024]

Without a CUDA device the GPU rows print "skipped" and the Warp CPU rows show the kernels' CPU fallback
(a correctness path, not a fast one).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from robot_rl.sim.batched_quad import BatchedQuadHover
from robot_rl.sim.threaded import ThreadedVectorEnv
from robot_rl.sim.warp_vector import WarpVectorEnv


def steps_per_second(venv: Any, action: np.ndarray, seconds: float) -> tuple[float, float]:
    """(env steps/s summed over ``venv``'s envs, seconds of the reset and the untimed first step)."""
    t0 = time.perf_counter()
    venv.reset(seed=0)
    venv.step(action)
    warm_up = time.perf_counter() - t0
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        venv.step(action)
        done += len(action)
    return done / (time.perf_counter() - t0), warm_up


def env_rate(n: int, seconds: float, **kwargs: Any) -> tuple[float, float]:
    """(env steps/s summed over drones, seconds to build and take the first step incl. kernel compiles)."""
    t0 = time.perf_counter()
    venv = BatchedQuadHover(n, **kwargs)
    build = time.perf_counter() - t0
    rate, warm_up = steps_per_second(venv, np.tile(np.array([0.55, 0.0, 0.0, 0.0], np.float32), (n, 1)), seconds)
    return rate, build + warm_up


def humanoid_rate(n: int, seconds: float, device: str | None) -> float:
    """G1 walking env steps/s summed over envs: ThreadedVectorEnv (device None) or WarpVectorEnv."""
    env_id = "robot_rl/HumanoidWalk-v0"
    venv = ThreadedVectorEnv(env_id, n, nthread=2) if device is None else WarpVectorEnv(env_id, n, device=device)
    try:
        return steps_per_second(venv, np.zeros((n, 29), np.float32), seconds)[0]
    finally:
        venv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--drones", type=int, nargs="+", default=[64, 256, 1024], help="batch sizes (CPU rows)")
    parser.add_argument("--gpu-drones", type=int, nargs="+", default=[1024, 4096, 16384], help="batch sizes (GPU)")
    parser.add_argument("--humanoids", type=int, nargs="+", default=[16], help="G1 batch sizes (CPU rows)")
    parser.add_argument("--gpu-humanoids", type=int, nargs="+", default=[1024, 4096], help="G1 batch sizes (GPU)")
    args = parser.parse_args()
    try:
        import warp as wp
    except ImportError:
        raise SystemExit("needs mujoco-warp (pip install -e '.[gpu]')") from None
    wp.config.log_level = 30
    wp.init()
    cuda = wp.is_cuda_available()
    print("## BatchedQuadHover env steps/s (10 physics steps each), ratio to mujoco.batch 2 threads, same drones")
    print("| drones | mujoco.batch 2 threads | Warp cpu | / batch | Warp cuda | / batch "
          "| Warp start-up (cpu / cuda) [s] |")
    print("|---|---|---|---|---|---|---|")
    for n in sorted(set(args.drones) | (set(args.gpu_drones) if cuda else set())):
        cpu_rate, _ = env_rate(n, args.seconds, nthread=2)
        row = [f"{n:,}", f"{cpu_rate:,.0f}"]
        if n in args.drones:
            warp_cpu, start_cpu = env_rate(n, args.seconds, physics="warp", device="cpu")
            row += [f"{warp_cpu:,.0f}", f"{warp_cpu / cpu_rate:.2f}"]
        else:
            row += ["-", "-"]
            start_cpu = float("nan")
        if cuda:
            warp_gpu, start_gpu = env_rate(n, args.seconds, physics="warp", device="cuda:0")
            row += [f"{warp_gpu:,.0f}", f"**{warp_gpu / cpu_rate:.2f}**", f"{start_cpu:.1f} / {start_gpu:.1f}"]
        else:
            row += ["skipped (no CUDA device)", "-", f"{start_cpu:.1f} / -"]
        print("| " + " | ".join(row) + " |", flush=True)
    print("\n## G1 HumanoidWalk env steps/s, ratio to ThreadedVectorEnv on 2 threads, same envs")
    print("| envs | threaded 2 threads | Warp cpu | / threaded | Warp cuda | / threaded |")
    print("|---|---|---|---|---|---|")
    for n in sorted(set(args.humanoids) | (set(args.gpu_humanoids) if cuda else set())):
        cpu_rate = humanoid_rate(n, args.seconds, None)
        row = [f"{n:,}", f"{cpu_rate:,.0f}"]
        if n in args.humanoids:
            warp_cpu = humanoid_rate(n, args.seconds, "cpu")
            row += [f"{warp_cpu:,.0f}", f"{warp_cpu / cpu_rate:.2f}"]
        else:
            row += ["-", "-"]
        if cuda:
            warp_gpu = humanoid_rate(n, args.seconds, "cuda:0")
            row += [f"{warp_gpu:,.0f}", f"**{warp_gpu / cpu_rate:.2f}**"]
        else:
            row += ["skipped (no CUDA device)", "-"]
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
