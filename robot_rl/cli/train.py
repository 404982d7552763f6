"""Train an imitation policy from an episode store (zarr) or a LeRobot v3 dataset.

    robot-rl train config/policies/flow_pick_lift.yaml --dataset data/pick.zarr --out runs/flow
    robot-rl train config/policies/flow_pick_lift.yaml --out runs/flow --resume     # continue a run
    robot-rl train config/policies/diffusion_pick_lift.yaml --set steps=500 --set policy.horizon=8

Writes TensorBoard logs (runs/<name>/tensorboard), checkpoints (checkpoints/last) and the exported
policy (runs/<name>/policy: model.safetensors + policy.json) that ``robot-rl eval`` runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "train a diffusion / flow / MeanFlow / VLA policy from a dataset (config file, resume, TensorBoard)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl train``."""
    parser.add_argument("config", help="training config YAML (see config/policies/)")
    parser.add_argument("--dataset", help="episode store (.zarr) or LeRobot v3 folder; overrides the config")
    parser.add_argument("--out", required=True, help="run folder (checkpoints, logs, exported policy)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. steps=500 or policy.horizon=8 (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Load the config, resolve the dataset, train, print where the policy went."""
    from robot_rl.core.config import ConfigError, load_config
    from robot_rl.data.schema import DatasetError
    from robot_rl.policies.base import CheckpointError
    from robot_rl.training.loop import TrainConfig, train

    overrides = list(args.overrides)
    try:
        cfg = load_config(TrainConfig, args.config, overrides)
        if args.dataset:
            cfg.dataset = str(resolve_dataset(Path(args.dataset), Path(args.out)))
        elif cfg.dataset:
            cfg.dataset = str(resolve_dataset(Path(cfg.dataset), Path(args.out)))
        result = train(cfg, args.out, resume=args.resume, progress=not args.no_progress,
                       log=None if not args.no_progress else _print_log)
    except (ConfigError, DatasetError, CheckpointError, FileNotFoundError) as exc:
        print(f"robot-rl train: error: {exc}")
        return 2
    last = f"{result.losses[-1]:.4f}" if result.losses else "n/a"
    print(f"trained {cfg.policy_type} to step {result.steps} in {result.seconds:.0f} s (final loss {last}); "
          f"policy: {result.policy_path}")
    return 0


def _print_log(step: int, metrics: dict[str, float]) -> None:
    print(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()), flush=True)


def resolve_dataset(path: Path, out: Path) -> Path:
    """An episode store as is; a LeRobot v3 folder (meta/info.json) is imported once into <out>/dataset.zarr."""
    if (path / ".zgroup").is_file():
        return path
    if (path / "meta" / "info.json").is_file():
        dest = out / "dataset.zarr"
        if not (dest / ".zgroup").is_file():
            from robot_rl.data.lerobot_import import import_lerobot

            out.mkdir(parents=True, exist_ok=True)
            import_lerobot(path, dest, progress=False).close()
        return dest
    raise FileNotFoundError(f"{path}: neither an episode store (.zgroup) nor a LeRobot v3 dataset (meta/info.json)")
