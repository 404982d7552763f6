"""Train an imitation policy from an episode store (zarr) or a LeRobot v3 dataset.

Writes TensorBoard logs (runs/<name>/tensorboard), checkpoints (checkpoints/last) and the exported
policy (runs/<name>/policy: model.safetensors + policy.json) that ``robot-rl eval`` runs.
"""

from __future__ import annotations

import argparse

HELP = "train a diffusion, flow, MeanFlow or VLA policy on a dataset"
EXAMPLES = """\
robot-rl train config/policies/flow_pick_lift.yaml --dataset data/pick.zarr --out runs/flow
robot-rl train config/policies/flow_pick_lift.yaml --out runs/flow --resume     # continue a run
robot-rl train config/policies/diffusion_pick_lift.yaml --out runs/diffusion --set steps=500 --set policy.horizon=8
robot-rl train config/policies/flow_pick_lift.yaml --out runs/flow --device cuda  # default: auto
robot-rl train config/policies/vla_pick_lift.yaml --dataset lerobot/pick --out runs/vla   # a LeRobot v3 folder
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl train``."""
    parser.add_argument("config", help="training config YAML (see config/policies/)")
    parser.add_argument("--dataset", help="episode store (.zarr) or LeRobot v3 folder; overrides the config")
    parser.add_argument("--out", required=True, help="run folder (checkpoints, logs, exported policy)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. steps=500 or policy.horizon=8 (repeatable)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"],
                        help="where to train (the config's `device`, default auto: CUDA when available)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Train (robot_rl.training.runs.train_policy), print where the policy went."""
    from robot_rl.core.config import ConfigError
    from robot_rl.core.device import DeviceError
    from robot_rl.data.schema import DatasetError
    from robot_rl.policies.base import CheckpointError
    from robot_rl.training.runs import train_policy

    try:
        overrides = [*args.overrides, *([f"device={args.device}"] if args.device else [])]
        done = train_policy(args.config, args.out, dataset=args.dataset, overrides=overrides,
                            resume=args.resume, progress=not args.no_progress,
                            log=None if not args.no_progress else _print_log)
    except (ConfigError, DatasetError, CheckpointError, DeviceError, FileNotFoundError) as exc:
        print(f"robot-rl train: error: {exc}")
        return 2
    print(done.summary())
    return 0


def _print_log(step: int, metrics: dict[str, float]) -> None:
    print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()), flush=True)
