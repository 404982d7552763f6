"""Online fine-tuning with human interventions: one learner process and N actor processes.

TCP between machines must be TLS (``fleet.tls_cert``/``fleet.tls_key`` on the learner, ``--tls-ca`` on an
actor); ``--insecure`` (or ``ROBOT_RL_ALLOW_PLAINTEXT=1``) allows plaintext on a non-loopback address, with a
warning. The secret file and the TLS key must be readable by their owner only (``chmod 600``).

``run`` writes the config into the run folder and starts the others as child processes. The learner
checkpoints into the run folder, so ``robot-rl online learner --run ...`` after a crash resumes with its
buffers; actors keep running while it is away and reconnect. ``learner.algorithm`` picks what is learnt:
``hg_dagger`` (config/learners/online_pick_lift.yaml), ``residual`` (online_pick_lift_residual.yaml,
online_quad_residual.yaml), ``rlpd`` (online_pick_lift_rlpd.yaml, no policy: --demos) or ``dsrl``
(online_pick_lift_dsrl.yaml).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from robot_rl.learners.online_config import OnlineConfig

HELP = "online fine-tuning: a learner and actors, a simulated human"
EXAMPLES = """\
robot-rl online run --policy runs/bc/policy --demos data/pick.zarr --run runs/online   # all of it
robot-rl online run --config config/learners/online_pick_lift_rlpd.yaml --demos data/pick.zarr \\
    --run runs/rlpd --seconds 600                  # RLPD from demonstrations, no policy, 10 minutes
robot-rl online learner --run runs/online          # or by hand: the learner (reads runs/online/online.yaml)
robot-rl online actor --run runs/online --index 1  # ... and any number of actors, in other terminals
robot-rl online actor --connect learner-host:7450 --secret-file learner.key --tls-ca learner.crt   # elsewhere
robot-rl online run --ray auto --policy runs/bc/policy --run runs/fleet   # learner + actors on a Ray cluster
robot-rl online status runs/online                 # actors, learner, interventions (also in TensorBoard)
robot-rl online view runs/online                   # the same, live in rerun (pip install 'robot_rl[viz]')
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl online``."""
    from robot_rl.learners.roles import add_role_parsers

    sub = parser.add_subparsers(dest="role", metavar="ROLE", required=True)
    run = sub.add_parser("run", help="start a learner and the actors, wait, print the learning curve",
                         description="learner.algorithm in the config picks hg_dagger, residual, rlpd or dsrl; "
                                     "shipped configs: config/learners/online_*.yaml")
    run.add_argument("--config", default=None,
                     help="online config YAML (default: the installed config/learners/online_pick_lift.yaml, "
                          "HG-DAgger; online_pick_lift_residual.yaml, _rlpd.yaml, _dsrl.yaml beside it)")
    run.add_argument("--seconds", type=float, default=None,
                     help="wall-clock budget: the actors stop after their current episode when it is spent")
    run.add_argument("--run", required=True, help="run folder (weights, checkpoints, logs)")
    run.add_argument("--policy", help="checkpoint folder of the policy to fine-tune (overrides the config)")
    run.add_argument("--demos", help="episode store of demonstrations to mix in (overrides the config)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. actor.episodes=20 (repeatable)")
    run.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                     help="run the learner and the actors as Ray actors on a cluster (ADDRESS: 'auto' for the one "
                          "running here, host:6379, or nothing to start a local one; needs robot_rl[fleet])")
    add_role_parsers(sub)
    for role in (run, sub.choices["learner"], sub.choices["actor"]):
        role.add_argument("--insecure", action="store_true",
                          help="allow plaintext TCP on a non-loopback address (no TLS): robot data and weights cross "
                               "the network unencrypted; logged as a warning")
    status = sub.add_parser("status", help="actors, learner and interventions of a running (or finished) run")
    status.add_argument("run_folder", metavar="RUN", help="the run folder the learner writes to")
    view = sub.add_parser("view", help="follow a running (or finished) run live in rerun: losses, success, "
                          "interventions, weight versions, camera frames")
    view.add_argument("run_folder", metavar="RUN", help="the run folder the learner writes to")
    view.add_argument("--rrd", default=None, metavar="OUT.rrd", help="save the recording to this file (no viewer "
                      "unless --spawn)")
    view.add_argument("--spawn", action="store_true", help="open a rerun viewer (the default without --rrd)")
    view.add_argument("--seconds", type=float, default=None, help="stop following after this long (default: Ctrl-C)")
    view.add_argument("--poll", type=float, default=1.0, metavar="S", help="seconds between reads (default: 1)")
    view.add_argument("--no-frames", action="store_true", help="leave camera frames out")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the role (the learner and actor roles are the core's, in robot_rl.learners.roles)."""
    from robot_rl.core.config import ConfigError, load_config
    from robot_rl.fleet.security import PLAINTEXT_ENV
    from robot_rl.fleet.wire import AuthError
    from robot_rl.learners.online_config import OnlineConfig, default_config_path
    from robot_rl.learners.roles import exit_with_parent, run_role

    if getattr(args, "insecure", False):  # read by the TCP transport here and in every process started from here
        os.environ[PLAINTEXT_ENV] = "1"
    try:
        if args.role == "run":
            cfg = load_config(OnlineConfig, args.config or default_config_path(), args.overrides)
            if args.policy:
                cfg.policy = args.policy
            if args.demos:
                cfg.learner.demos = args.demos
            from robot_rl.learners.algorithms import registry

            if not cfg.policy and registry.of(cfg.learner).needs_policy(cfg):
                raise ConfigError("policy: no policy to fine-tune (give --policy)")
            if args.ray is not None:
                return _run_ray(cfg, Path(args.run), args.ray, args.seconds)
            return _run_all(cfg, Path(args.run), args.seconds)
        if args.role == "status":
            from robot_rl.fleet.fleet_status import format_status, read_status

            print(format_status(read_status(args.run_folder)))
            return 0
        if args.role == "view":
            return _view(args)
        if args.exit_with_parent is not None:
            exit_with_parent(args.exit_with_parent)
        run_role(args)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"robot-rl online: error: {exc}")
        return 2
    except AuthError as exc:
        print(f"robot-rl online: the learner refused this actor: {exc}")
        return 3
    return 0


def _view(args: argparse.Namespace) -> int:
    try:
        from robot_rl.learners.live_view import follow_run

        counts = follow_run(args.run_folder, rrd=args.rrd, spawn=args.spawn or not args.rrd, seconds=args.seconds,
                            poll_s=args.poll, frames=not args.no_frames)
    except (ImportError, RuntimeError) as exc:  # rerun missing (the viz extra), no viewer reachable
        print(f"robot-rl online: error: {exc}")
        return 2
    frames = (f"{counts.frames} camera frames ({', '.join(counts.image_keys)})" if counts.frames else
              "no camera frames (the learner's checkpointed steps hold no images, or none were checkpointed yet)")
    print(f"followed {args.run_folder}: {counts.learner_lines} learner log lines, "
          f"{sum(counts.episodes.values())} episodes of {len(counts.episodes)} actor(s), {counts.statuses} status "
          f"updates, {frames}" + (f"; recording: {args.rrd}" if args.rrd else ""))
    return 0


def _run_all(cfg: OnlineConfig, folder: Path, seconds: float | None = None) -> int:
    from robot_rl.learners.online import plot_learning_curve, run_online

    timeout = 3600.0 if seconds is None else seconds + 900.0
    result = run_online(cfg, folder, budget_s=seconds, timeout=timeout)
    print(f"{'episodes':>10} {'success':>8} {'human steps':>12} {'takeovers/ep':>13} {'weights':>8}")
    for b in result.blocks(5):
        print(f"{b['first']:>4}-{b['last']:<5} {b['success']:>8.0%} {b['intervention_rate']:>12.0%} "
              f"{b['takeovers']:>13.2f} {'v' + str(b['version']):>8}")
    png = plot_learning_curve(result, folder / "learning_curve.png", title=cfg.learner.algorithm)
    print(f"{len(result.episodes)} episodes in {result.seconds:.0f} s; learning curve: {png}")
    return 0


def _run_ray(cfg: OnlineConfig, folder: Path, address: str, seconds: float | None = None) -> int:
    from robot_rl.learners.ray_fleet import run_on_ray

    result = run_on_ray(cfg, folder, address=None if address == "local" else address, budget_s=seconds)
    print(f"{len(result.episodes)} episodes from {cfg.actors} Ray actors in {result.seconds:.0f} s; "
          f"the learner holds {result.learner[-1]['steps'] if result.learner else 0} steps; status: "
          f"robot-rl online status {folder}")
    return 0
