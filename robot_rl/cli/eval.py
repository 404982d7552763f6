"""Evaluate a trained policy in a simulation environment for N seeded episodes.

    robot-rl eval runs/flow/policy --env robot_rl/ArmPickLift-v0 --episodes 50 --seed 100000

Prints the success rate with a 95% Wilson interval and writes eval.json and eval.png next to the policy
(or into --out).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "run a trained policy in a sim env for N seeded episodes: success rate, 95% CI and a plot"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl eval``."""
    parser.add_argument("policy", help="policy checkpoint folder (model.safetensors + policy.json)")
    parser.add_argument("--env", default="robot_rl/ArmPickLift-v0", help="gymnasium env id (default: %(default)s)")
    parser.add_argument("--episodes", type=int, default=50, help="episodes (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=100_000,
                        help="seed of the first episode, then +1 (default: %(default)s, away from recording seeds)")
    parser.add_argument("--steps", type=int, default=None, help="override the sampling steps of the policy")
    parser.add_argument("--exec-mode", choices=["ensemble", "blend", "latest"],
                        help="override how chunks are executed (default: as trained)")
    parser.add_argument("--action-steps", type=int, help="override the steps executed per chunk")
    parser.add_argument("--task", help="task text for language-conditioned policies, kept for every episode "
                        "(default: the env's instruction of each episode, e.g. ArmMultiTask-v0, else the "
                        "policy's own)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="env (SimConfig) setting, e.g. tasks=[lift_blue] or "
                        "randomization={object_rgb_jitter: 0.1} (repeatable)")
    parser.add_argument("--out", help="folder for eval.json / eval.png (default: the policy folder)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Load, roll out, report."""
    import os

    # camera policies render offscreen; MuJoCo picks its GL platform when first imported
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    import gymnasium as gym
    import torch

    import robot_rl.sim  # noqa: F401  (registers the env ids)
    from robot_rl.cli.sim import env_overrides
    from robot_rl.core.device import DeviceError, resolve_device
    from robot_rl.policies.base import CheckpointError, Policy
    from robot_rl.runtime.policy_runner import PolicyRunner
    from robot_rl.training.evaluate import env_options_for, evaluate, save_report

    torch.set_num_threads(args.threads)
    try:
        policy = Policy.load(args.policy).to(resolve_device(args.device))
    except (CheckpointError, DeviceError, ValueError) as exc:
        print(f"robot-rl eval: error: {exc}")
        return 2
    if args.steps is not None:
        if not hasattr(policy.config, "num_inference_steps"):
            print(f"robot-rl eval: error: --steps: a {policy.name} policy has no sampling steps")
            return 2
        policy.config.num_inference_steps = args.steps
    if args.exec_mode or args.action_steps:
        from dataclasses import replace

        try:
            ex = policy.config.executor
            policy.set_executor(replace(ex, mode=args.exec_mode or ex.mode, n_action_steps=args.action_steps
                                        or ex.n_action_steps))
        except ValueError as exc:
            print(f"robot-rl eval: error: {exc}")
            return 2
    try:
        options = env_options_for(policy)  # the cameras a camera policy was trained on
        env = gym.make(args.env, **{**options, **env_overrides(args.override)})
    except (ValueError, TypeError, gym.error.Error) as exc:
        print(f"robot-rl eval: error: {exc}")
        return 2
    try:
        # --task holds for every episode, the env's own instructions included (a swap test by hand)
        agent = policy if args.task is None else PolicyRunner(policy, instruction=args.task)
        report = evaluate(agent, env, args.env, args.episodes, args.seed, progress=not args.no_progress)
    finally:
        env.close()
    json_path, png_path = save_report(report, Path(args.out or args.policy), title=f"{policy.name} on {args.env}")
    print(report.summary())
    print(f"wrote {json_path} and {png_path}")
    return 0
