"""The main job on embedded defaults: check the installation, then run each stage that exists.

Now: installation check -> scripted-expert demonstrations on the simulated Panda pick-and-lift task,
recorded into a crash-safe episode store -> a read-only validation of that store, plots and a LeRobot
v3 export. Stages still to come (policy training, online fine-tuning with a simulated human) are
appended here as they land; each stage prints what it did and how long it took.
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
    parser.add_argument("--episodes", type=int, default=20, help="scripted demonstrations to record")


def _stage_environment(args: argparse.Namespace) -> str:
    from robot_rl.cli.doctor import collect

    checks = collect(render=False)
    failed = [c.name for c in checks if c.required and not c.ok]
    if failed:
        raise RuntimeError(f"installation incomplete: {failed}; run `robot-rl doctor` for fixes")
    return f"{sum(c.ok for c in checks)}/{len(checks)} checks ok"


def _cli(*argv: str) -> None:
    from robot_rl.cli.main import main

    code = main(list(argv))
    if code:
        raise RuntimeError(f"robot-rl {' '.join(argv)} exited with {code}")


def _stage_demonstrations(args: argparse.Namespace) -> str:
    import shutil
    from pathlib import Path

    store = Path(args.out) / "demos.zarr"
    if store.exists():
        shutil.rmtree(store)
    _cli("data", "record", "--env", "robot_rl/ArmPickLift-v0", "--episodes", str(args.episodes),
         "--seed", str(args.seed), "--task", "pick up the cube and lift it", "--out", str(store))
    from robot_rl.data.store import EpisodeStore

    with EpisodeStore.open(store) as demos:
        outcomes = [demos.episode_info(i).success for i in range(demos.num_episodes)]
        frames = demos.num_frames
    return f"{len(outcomes)} episodes, {frames} steps, expert success {sum(bool(o) for o in outcomes)}/{len(outcomes)}"


def _stage_dataset(args: argparse.Namespace) -> str:
    from pathlib import Path

    out = Path(args.out)
    _cli("data", "validate", str(out / "demos.zarr"))
    _cli("data", "plot", str(out / "demos.zarr"), "--out", str(out / "plots"), "--episodes", "0,1")
    _cli("data", "export", str(out / "demos.zarr"), "--out", str(out / "lerobot"), "--overwrite")
    return f"valid; plots in {out / 'plots'}; LeRobot v3 export in {out / 'lerobot'}"


STAGES: list[tuple[str, Callable[[argparse.Namespace], str]]] = [
    ("environment", _stage_environment),
    ("demonstrations", _stage_demonstrations),
    ("dataset", _stage_dataset),
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
    print(f"\n{'stage':<16} {'result':<64} time")
    for name, result, dt in rows:
        print(f"{name:<16} {result:<64} {dt:5.1f} s")
    return 0
