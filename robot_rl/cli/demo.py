"""The main job on embedded defaults: demonstrations -> behaviour cloning -> online fine-tuning -> better.

Stages: installation check -> scripted-expert demonstrations of Panda pick-and-lift into a crash-safe
episode store (validated, plotted, exported to LeRobot v3) -> a flow-matching policy trained on them
(behaviour cloning) -> its success rate on unseen seeds -> online fine-tuning: a learner process trains
HG-DAgger on the corrections of a simulated human who takes over when a grasp is about to fail, while an
actor process keeps running episodes and swaps in each new version between action chunks -> the success
rate on the same seeds again. Prints a table (success before and after, interventions over time, wall
time) and writes ``learning_curve.png``. Every stage prints what it did and how long it took.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

HELP = "run the main robot_rl job end to end on embedded defaults"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl demo``."""
    parser.add_argument("--out", default="outputs/demo", help="folder for results (plots, checkpoints)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for every stage")
    parser.add_argument("--episodes", type=int, default=20, help="scripted demonstrations to record")
    parser.add_argument("--bc-steps", type=int, default=1500, help="behaviour-cloning gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=30, help="evaluation episodes before and after")
    parser.add_argument("--online-episodes", type=int, default=200, help="episodes of online fine-tuning")
    parser.add_argument("--actors", type=int, default=1, help="actor processes during online fine-tuning")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of the online config (config/learners/online_pick_lift.yaml)")
    parser.add_argument("--pixels", action="store_true",
                        help="the policy also sees a 64x64 front camera (slower: rendering on CPU)")
    parser.add_argument("--skip-to", choices=[name for name, _ in STAGES], default=None,
                        help="reuse the outputs of the earlier stages in --out and start here")


ENV_ID = "robot_rl/ArmPickLift-v0"
PIXEL_CAMERA, PIXEL_SIZE = "front", (64, 64)
"""Camera and image size of the ``--pixels`` variant (small: rendering on CPU is slow)."""


def _env_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"cameras": [PIXEL_CAMERA], "image_size": list(PIXEL_SIZE)} if args.pixels else {}


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
    cameras = ["--cameras", PIXEL_CAMERA, "--image-size", *map(str, PIXEL_SIZE)] if args.pixels else []
    _cli("data", "record", "--env", ENV_ID, "--episodes", str(args.episodes), "--seed", str(args.seed),
         "--task", "pick up the cube and lift it", "--out", str(store), *cameras)
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


EVAL_SEED = 100_000
"""Evaluation seeds start here: never used by the demonstrations (seed 0...) or the actors (5000...)."""


def _stage_behaviour_cloning(args: argparse.Namespace) -> str:
    from pathlib import Path

    from robot_rl.paths import package_share_dir

    out = Path(args.out) / "bc"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    config = package_share_dir() / "config" / "policies" / "flow_pick_lift.yaml"
    _cli("train", str(config), "--dataset", str(Path(args.out) / "demos.zarr"), "--out", str(out),
         "--set", f"steps={args.bc_steps}", "--set", f"seed={args.seed}",
         *(["--set", f"policy.image_keys=[image_{PIXEL_CAMERA}]"] if args.pixels else []))
    return f"flow policy, {args.bc_steps} steps on {args.episodes} demonstrations -> {out / 'policy'}"


def _evaluate(args: argparse.Namespace, policy_dir: object, name: str) -> str:
    from pathlib import Path

    import gymnasium as gym
    import torch

    import robot_rl.sim  # noqa: F401
    from robot_rl.policies.base import Policy
    from robot_rl.training.evaluate import evaluate, save_report

    torch.set_num_threads(1)
    policy = Policy.load(str(policy_dir))
    env = gym.make(ENV_ID, **_env_options(args))
    try:
        report = evaluate(policy, env, ENV_ID, args.eval_episodes, EVAL_SEED, progress=True)
    finally:
        env.close()
    save_report(report, Path(args.out) / f"eval_{name}", title=f"{name}: {policy.name} policy v{policy.version}")
    args.results[name] = report
    lo, hi = report.interval()
    k, n = sum(report.successes), len(report.successes)
    return f"success {k}/{n} = {report.success_rate:.0%} (95% CI {lo:.0%}-{hi:.0%})"


def _stage_eval_before(args: argparse.Namespace) -> str:
    from pathlib import Path

    return _evaluate(args, Path(args.out) / "bc" / "policy", "before")


def _stage_online(args: argparse.Namespace) -> str:
    from pathlib import Path

    from robot_rl.cli.online import default_config_path
    from robot_rl.core.config import load_config
    from robot_rl.learners.online import run_online
    from robot_rl.learners.online_config import OnlineConfig

    out = Path(args.out)
    cfg = load_config(OnlineConfig, default_config_path(),
                      [f"actor.episodes={args.online_episodes}", f"actors={args.actors}", *args.overrides])
    cfg.policy = str(out / "bc" / "policy")
    cfg.learner.demos = str(out / "demos.zarr")
    cfg.actor.env_options = _env_options(args)
    run = out / "online"
    if run.exists():
        import shutil

        shutil.rmtree(run)
    result = run_online(cfg, run)
    args.results["online"] = result
    last = result.learner[-1] if result.learner else {}
    return (f"{len(result.episodes)} episodes, {last.get('updates', 0)} updates, "
            f"{last.get('human_steps', 0)} human steps, weights v{last.get('version', 0)}")


def _stage_eval_after(args: argparse.Namespace) -> str:
    from pathlib import Path

    from robot_rl.learners.transport import list_versions

    versions = list_versions(Path(args.out) / "online" / "weights")
    if not versions:
        raise RuntimeError("online fine-tuning published no weights")
    return _evaluate(args, versions[-1][1], "after")


STAGES: list[tuple[str, Callable[[argparse.Namespace], str]]] = [
    ("environment", _stage_environment),
    ("demonstrations", _stage_demonstrations),
    ("dataset", _stage_dataset),
    ("behaviour cloning", _stage_behaviour_cloning),
    ("evaluation", _stage_eval_before),
    ("online learning", _stage_online),
    ("evaluation 2", _stage_eval_after),
]


def _summary(args: argparse.Namespace, rows: list[tuple[str, str, float]]) -> None:
    from pathlib import Path

    from robot_rl.learners.online import plot_learning_curve

    print(f"\n{'stage':<18} {'result':<72} time")
    for name, result, dt in rows:
        print(f"{name:<18} {result:<72} {dt:6.1f} s")
    print(f"{'total':<18} {'':<72} {sum(r[2] for r in rows):6.1f} s")
    before, after, online = (args.results.get(k) for k in ("before", "after", "online"))
    if online is not None:
        print("\nonline fine-tuning, in blocks of episodes:")
        print(f"  {'episodes':<10} {'success':>8} {'takeovers/episode':>18} {'steps by the human':>19} {'weights':>8}")
        for b in online.blocks(5):
            print(f"  {b['first'] + 1:>3}-{b['last'] + 1:<6} {b['success']:>8.0%} {b['takeovers']:>18.2f} "
                  f"{b['intervention_rate']:>19.0%} {'v' + str(b['version']):>8}")
        png = plot_learning_curve(online, Path(args.out) / "learning_curve.png",
                                  None if before is None else before.success_rate,
                                  None if after is None else after.success_rate)
        print(f"  learning curve: {png}")
    if before is not None and after is not None:
        print(f"\nsuccess without a human on {len(after.successes)} unseen seeds: "
              f"{before.success_rate:.0%} before -> {after.success_rate:.0%} after online fine-tuning")


def run(args: argparse.Namespace) -> int:
    """Run the stages in order (from ``--skip-to``); stop at the first failure."""
    args.results = {}
    if args.pixels:
        import os

        os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen; read when mujoco is first imported
    names = [name for name, _ in STAGES]
    first = names.index(args.skip_to) if args.skip_to else 0
    rows = []
    for name, stage in STAGES[first:]:
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        result = stage(args)
        rows.append((name, result, time.perf_counter() - t0))
        print(f"   {result}", flush=True)
    _summary(args, rows)
    return 0
