"""Evaluate a trained policy in a simulation environment for N seeded episodes.

Prints the success rate with a 95% Wilson interval and writes eval.json and eval.png next to the policy
(or into --out).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

HELP = "evaluate a policy in simulation: success rate, 95% CI, plot"
EXAMPLES = """\
robot-rl eval runs/flow/policy --env robot_rl/ArmPickLift-v0 --episodes 50 --seed 100000
robot-rl eval runs/flow/policy --env robot_rl/ArmPickLift-RealStandIn-v0 --workers 2   # on the "real" stand-in
robot-rl eval runs/hover/policy --env robot_rl/QuadHover-v0 --episodes 50 --out runs/hover/eval
robot-rl eval runs/vla/policy --env robot_rl/ArmMultiTask-v0 --override "tasks=[lift_blue]"
"""


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
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (of each process; default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes the episodes run in, this one included; the same report, each episode "
                        "is seeded on its own (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Load, roll out, report."""
    import os

    # camera policies render offscreen; MuJoCo picks its GL platform when first imported
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    import torch

    import robot_rl.sim  # noqa: F401  (registers the env ids)
    from robot_rl.cli.sim import env_overrides, make_env
    from robot_rl.core.device import DeviceError
    from robot_rl.policies.base import CheckpointError
    from robot_rl.training.eval_workers import EvalRecipe
    from robot_rl.training.evaluate import env_options_for, evaluate, save_report

    if args.workers < 1:
        print(f"robot-rl eval: error: --workers: must be >= 1, got {args.workers}")
        return 2
    torch.set_num_threads(args.threads)
    settings = PolicySettings(args.policy, args.device, args.steps, args.exec_mode, args.action_steps, args.task)
    try:
        policy = settings.policy()
    except (CheckpointError, DeviceError, ValueError) as exc:
        print(f"robot-rl eval: error: {exc}")
        return 2
    try:
        options = {**env_options_for(policy), **env_overrides(args.override)}  # a camera policy's cameras
        env = make_env(args.env, **options)
    except ValueError as exc:
        print(f"robot-rl eval: error: {exc}")
        return 2
    try:
        report = evaluate(settings.agent(policy), env, args.env, args.episodes, args.seed,
                          progress=not args.no_progress, workers=args.workers,
                          recipe=EvalRecipe(args.env, settings, options, threads=args.threads))
    finally:
        env.close()
    json_path, png_path = save_report(report, Path(args.out or args.policy), title=f"{policy.name} on {args.env}")
    print(report.summary())
    print(f"wrote {json_path} and {png_path}")
    return 0


@dataclass(frozen=True)
class PolicySettings:
    """The policy ``robot-rl eval`` runs, as its options set it up (picklable: a worker process builds it too)."""

    path: str
    device: str = "auto"
    steps: int | None = None
    exec_mode: Literal["ensemble", "blend", "latest"] | None = None
    action_steps: int | None = None
    task: str | None = None

    def policy(self) -> Any:
        """The checkpoint on its device with the overrides (raises CheckpointError, DeviceError, ValueError)."""
        from robot_rl.core.device import resolve_device
        from robot_rl.policies.base import Policy

        policy = Policy.load(self.path).to(resolve_device(self.device))
        if self.steps is not None:
            if not hasattr(policy.config, "num_inference_steps"):
                raise ValueError(f"--steps: a {policy.name} policy has no sampling steps")
            policy.config.num_inference_steps = self.steps
        if self.exec_mode or self.action_steps:
            ex = policy.config.executor
            policy.set_executor(replace(ex, mode=self.exec_mode or ex.mode,
                                        n_action_steps=self.action_steps or ex.n_action_steps))
        return policy

    def agent(self, policy: Any) -> Any:
        """What acts: the policy, or a runner that keeps ``--task`` for every episode (a swap test by hand)."""
        from robot_rl.runtime.policy_runner import PolicyRunner

        return policy if self.task is None else PolicyRunner(policy, instruction=self.task)

    def __call__(self, env: Any) -> Any:
        """The agent, built afresh (an :attr:`EvalRecipe.agent`)."""
        return self.agent(self.policy())
