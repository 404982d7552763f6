"""The main job on embedded defaults: check the installation, then run each stage that exists.

Stages grow with the project (simulation rollouts, demonstrations, policy training, online fine-tuning
with a simulated human); each prints what it did and how long it took.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

HELP = "run the main robot_rl job end to end on embedded defaults"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl demo``."""
    parser.add_argument("--out", default="outputs/demo", help="folder for results (plots, checkpoints)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for every stage")


def _stage_environment(args: argparse.Namespace) -> str:
    from robot_rl.cli.doctor import collect

    checks = collect(render=False)
    failed = [c.name for c in checks if c.required and not c.ok]
    if failed:
        raise RuntimeError(f"installation incomplete: {failed}; run `robot-rl doctor` for fixes")
    return f"{sum(c.ok for c in checks)}/{len(checks)} checks ok"


STAGES: list[tuple[str, Callable[[argparse.Namespace], str]]] = [
    ("environment", _stage_environment),
]


def run(args: argparse.Namespace) -> int:
    """Run the stages in order; stop at the first failure."""
    rows = []
    for name, stage in STAGES:
        t0 = time.perf_counter()
        print(f"== {name}")
        result = stage(args)
        rows.append((name, result, time.perf_counter() - t0))
        print(f"   {result}")
    print("\nstage            result                                   time")
    for name, result, dt in rows:
        print(f"{name:<16} {result:<40} {dt:6.1f} s")
    return 0
