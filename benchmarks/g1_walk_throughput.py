"""G1 walking env throughput: what each step of the recipe bought, side by side in one run, and the floor.

    .venv/bin/python benchmarks/g1_walk_throughput.py [--envs 64] [--seconds 20] [--repeats 2]

Rows (64 HumanoidWalk-v0 envs stepped with small random leg actions, the robot mostly standing and
stepping as early in training; falls reset as in training; alternated, medians of ``--repeats``):

* ``before``: the previous config (500 Hz physics, ``reward: tracking``, ThreadedVectorEnv on 2 threads);
* ``250 Hz``: physics at 250 Hz (5 substeps per 50 Hz step) with ``reward: gait``, same vector env;
* ``250 Hz, 2 processes``: the same envs split over 2 worker processes (robot_rl.sim.sharded);
* ``physics floor``: the compiled substep loop alone (the env's ``run_physics``, PD + actuators + mj_step)
  on one core, times the cores: what no Python per step would give.

``--train`` also runs ``config/rl/humanoid_walk.yaml`` for ``--train-seconds`` each way (threaded, 2
processes) and reports the training loop's steps/s (PPO inference and updates included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import robot_rl.sim  # noqa: F401
from robot_rl.sim.vector import make_vector_env

ENV = "robot_rl/HumanoidWalk-v0"
ROWS: dict[str, tuple[dict[str, Any], int]] = {
    "before": ({"reward": "tracking", "physics_hz": 500}, 1),
    "250 Hz": ({"reward": "gait", "physics_hz": 250}, 1),
    "250 Hz, 2 processes": ({"reward": "gait", "physics_hz": 250}, 2),
}


def vector_rate(options: dict[str, Any], processes: int, n: int, seconds: float) -> float:
    """Env steps/s of ``n`` threaded envs (split over ``processes``) with small random leg actions."""
    env = make_vector_env(ENV, n, threaded=True, processes=processes, **options)
    rng = np.random.default_rng(0)
    try:
        env.reset(seed=0)
        actions = np.zeros((64, n, 29), np.float32)
        actions[..., :12] = rng.uniform(-0.15, 0.15, (64, n, 12))
        for k in range(5):  # warm-up (compiled kernels, first resets)
            env.step(actions[k])
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            env.step(actions[steps // n % 64])
            steps += n
        return steps / (time.perf_counter() - t0)
    finally:
        env.close()


def physics_floor(seconds: float) -> float:
    """Policy steps/s of the compiled physics alone at 250 Hz on one core (no observation, reward, checks)."""
    env = gym.make(ENV, physics_hz=250).unwrapped
    env.reset(seed=0)
    substeps = env.config.substeps
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        env.run_physics(substeps)
        done += 1
        if done % 200 == 0:
            env.reset(seed=done)
    return done / (time.perf_counter() - t0)


def train_rate(processes: int, seconds: float) -> float:
    """Steps/s of the training loop (robot-rl rl train's) over ``seconds`` of the shipped walking config."""
    from robot_rl.core.config import load_config
    from robot_rl.rl.config import RLConfig
    from robot_rl.rl.train import train_rl

    cfg = load_config(RLConfig, Path(__file__).resolve().parents[1] / "config/rl/humanoid_walk.yaml",
                      [f"processes={processes}", f"time_budget_s={seconds}", "eval_every_steps=100000000",
                       "eval_episodes=2"])
    with tempfile.TemporaryDirectory() as tmp:
        return train_rl(cfg, Path(tmp) / "run", progress=False).steps_per_s


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--train-seconds", type=float, default=120.0)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in ROWS}
    for _ in range(args.repeats):
        for name, (options, processes) in ROWS.items():
            rates[name].append(vector_rate(options, processes, args.envs, args.seconds))
    floor = physics_floor(args.seconds) * len(os.sched_getaffinity(0))
    base = statistics.median(rates["before"])
    print(f"{args.envs} envs, {len(os.sched_getaffinity(0))} cores, medians of {args.repeats}")
    print("| vector env | steps/s | vs before |\n|---|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.2f}x |")
    print(f"| physics floor (compiled loop, 250 Hz, x cores) | {floor:,.0f} | {floor / base:.2f}x |")
    if args.train:
        runs: list[tuple[str, Callable[[], float]]] = [
            ("threaded", lambda: train_rate(1, args.train_seconds)),
            ("2 processes", lambda: train_rate(2, args.train_seconds))]
        for name, fn in runs:
            print(f"| training loop, {name} | {fn():,.0f} | |")


if __name__ == "__main__":
    main()
