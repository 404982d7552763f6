"""Sim-to-real alignment (ASAP's delta action, system identification, delta dynamics, domain randomisation).

The actions run in this order on one run folder: collect the motions, measure the gap, fit the methods,
evaluate them open loop, fine-tune the task policy in each aligned simulator. On hardware, put the robot's
motions into <run>/episodes.zarr (observation keys ``qpos``/``qvel``: the measured joint state; ``action``:
the applied commands) and start at ``gap``.
"""

from __future__ import annotations

import argparse

HELP = "sim-to-real alignment: collect, gap, fit, eval, finetune"
EXAMPLES = """\
robot-rl align collect --config config/align/quad.yaml --run runs/align_quad   # motions on the "real" robot
robot-rl align gap --config config/align/quad.yaml --run runs/align_quad       # nominal sim vs recorded
robot-rl align fit --config config/align/quad.yaml --run runs/align_quad --method all
robot-rl align fit --config config/align/arm.yaml --run runs/align_arm --method sysid --set sysid.generations=5
robot-rl align eval --config config/align/quad.yaml --run runs/align_quad      # open-loop table + plots
robot-rl align finetune --config config/align/quad.yaml --run runs/align_quad  # closed loop on the robot
"""

METHODS = ("sysid", "delta_dynamics", "delta_action")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl align``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("collect", "record motions on the real robot (here: the config's stand-in env)"),
                       ("gap", "replay the held-out motions open loop in the nominal simulator"),
                       ("fit", "fit alignment methods on the training motions"),
                       ("eval", "open-loop errors of every fitted method on the held-out motions, with plots"),
                       ("finetune", "train the task policy in each aligned simulator, fly it on the real robot")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--config", required=True, help="alignment config YAML (see config/align/)")
        p.add_argument("--run", required=True, help="run folder (episodes.zarr, fitted methods, results)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. sysid.generations=5 (repeatable)")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        if name == "fit":
            p.add_argument("--method", choices=[*METHODS, "all"], default="all", help="which method(s) to fit")


def run(args: argparse.Namespace) -> int:
    """Dispatch; exit 2 on bad input (config, episodes, artefacts), 1 when a fit diverged."""
    from pathlib import Path

    from robot_rl.align.config import AlignConfig
    from robot_rl.align.episodes import AlignmentError
    from robot_rl.align.models import FitDiverged
    from robot_rl.align.sysid import SysIDDiverged
    from robot_rl.core.config import ConfigError, load_config

    progress = not args.no_progress
    try:
        cfg = load_config(AlignConfig, args.config, args.overrides)
        run_dir = Path(args.run)
        if args.action == "collect":
            from robot_rl.align.episodes import collect
            from robot_rl.align.pipeline import episodes_path

            run_dir.mkdir(parents=True, exist_ok=True)
            path = collect(cfg, episodes_path(run_dir), progress)
            print(f"recorded {cfg.collect.episodes} episodes on {cfg.collect.env_id} into {path}")
        elif args.action in ("gap", "eval"):
            from robot_rl.align.pipeline import OPEN_LOOP_METHODS, evaluate_open_loop, format_table

            methods = ("nominal",) if args.action == "gap" else OPEN_LOOP_METHODS
            result = evaluate_open_loop(cfg, run_dir, methods, progress)
            print(format_table(result))
            print(f"plots: {run_dir / 'open_loop.png'}, {run_dir / 'overlay.png'}")
        elif args.action == "fit":
            from robot_rl.align.pipeline import fit

            for method in METHODS if args.method == "all" else (args.method,):
                meta = fit(cfg, run_dir, method, progress)
                print(f"{method}: fitted in {meta['seconds']:.1f} s ({meta['sim_steps']} simulator steps) -> "
                      f"{run_dir / method}")
        else:
            from robot_rl.align.finetune import finetune, format_closed_loop

            print(format_closed_loop(finetune(cfg, run_dir, progress)))
    except (ConfigError, AlignmentError) as exc:
        print(f"robot-rl align: error: {exc}")
        return 2
    except (FitDiverged, SysIDDiverged) as exc:
        print(f"robot-rl align: fit stopped: {exc}")
        return 1
    return 0
