"""Reinforcement learning from scratch in simulation: PPO (rsl_rl) or SAC, one config file, one command.

Writes TensorBoard logs, the deployable policy (runs/<name>/policy: an ``mlp`` policy, model.safetensors +
policy.json with the observation statistics inside), learning_curve.png, eval.json and summary.json.
"""

from __future__ import annotations

import argparse

HELP = "reinforcement learning from scratch in simulation (PPO, SAC)"
EXAMPLES = """\
robot-rl rl train config/rl/quad_hover.yaml --out runs/hover          # hover in about a minute on 2 cores
robot-rl rl train config/rl/quad_hover.yaml --out runs/hover2 --set target_success=null --set time_budget_s=300
robot-rl rl train config/rl/arm_reach.yaml --out runs/reach --set algorithm=sac
robot-rl rl train config/rl/humanoid_walk.yaml --out runs/walk --device cuda --set vector=warp \\
    --set processes=1 --set num_envs=4096    # the G1 on MuJoCo Warp (a CUDA GPU)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl rl``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = sub.add_parser("train", help="train a policy from scratch (see config/rl/)",
                           description="shipped configs: config/rl/quad_hover.yaml, arm_reach.yaml, humanoid_walk.yaml")
    train.add_argument("config", help="RL config YAML (see config/rl/)")
    train.add_argument("--out", required=True, help="run folder (a new one: policy, logs, learning curve)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. seed=3 or ppo.gamma=0.98 (repeatable)")
    train.add_argument("--device", choices=["auto", "cpu", "cuda"],
                       help="where the networks train (the config's `device`, default auto)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar (evaluations are still printed)")


def run(args: argparse.Namespace) -> int:
    """Train, print the outcome; exit 2 on a bad config, 1 when training stopped on a non-finite value."""
    from robot_rl.core.config import ConfigError, load_config
    from robot_rl.core.device import DeviceError
    from robot_rl.rl.config import RLConfig, TrainingError
    from robot_rl.rl.train import train_rl

    try:
        overrides = [*args.overrides, *([f"device={args.device}"] if args.device else [])]
        cfg = load_config(RLConfig, args.config, overrides)
        result = train_rl(cfg, args.out, progress=not args.no_progress,
                          log=(lambda msg: print(msg, flush=True)) if args.no_progress else None)
    except (ConfigError, DeviceError) as exc:
        print(f"robot-rl rl: error: {exc}")
        return 2
    except TrainingError as exc:
        print(f"robot-rl rl: training stopped: {exc}")
        return 1
    print(result.summary())
    return 0
