"""The two process roles of an online run, as functions and as a runnable module.

    python -m robot_rl.learners.roles learner --run runs/online [--max-seconds 600]
    python -m robot_rl.learners.roles actor --run runs/online --index 1
    python -m robot_rl.learners.roles actor --connect 10.0.0.5:7450 --secret-file learner.key --insecure

Both read the run folder's ``online.yaml``. :func:`robot_rl.learners.online.run_online` starts its
child processes with this module, so the core never goes back through the command line; ``robot-rl
online learner|actor`` calls the same functions.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from robot_rl.core.config import ConfigError
from robot_rl.fleet.wire import AuthError, parse_address, read_secret
from robot_rl.learners.online_config import load_run_config

__all__ = [
    "command",
    "exit_with_parent",
    "main",
    "run_actor_role",
    "run_learner",
    "run_remote_actor_role",
    "run_role",
]


def _say(line: str) -> None:
    print(line, flush=True)


def run_learner(run: str | Path, max_seconds: float | None = None,
                log: Callable[[str], None] = _say, allow_plaintext: bool = False) -> dict[str, Any]:
    """Serve a run folder's learner until stopped; returns its final counters.

    ``allow_plaintext`` (``--insecure``): as ``fleet.allow_plaintext`` in the run's config.
    """
    from robot_rl.learners.learner_process import OnlineLearner

    cfg = load_run_config(run)
    cfg.fleet.allow_plaintext = cfg.fleet.allow_plaintext or allow_plaintext
    learner = OnlineLearner(cfg, Path(run))
    if learner.resumed_from:
        log(f"resumed from the checkpoint: {learner.resumed_from}")
    result = learner.run(max_seconds)
    log(f"learner done: {result}")
    return result


def run_actor_role(run: str | Path, index: int = 0, log: Callable[[str], None] = _say) -> list[dict[str, Any]]:
    """Run actor ``index`` of a run folder to the end of its episodes; returns its episode records."""
    from robot_rl.learners.actor_process import run_actor

    records = run_actor(load_run_config(run), Path(run), index)
    log(f"actor {index}: {sum(r['success'] for r in records)}/{len(records)} episodes succeeded")
    return records


def run_remote_actor_role(connect: str, secret_file: str | Path, workdir: str | Path, index: int | None = None,
                          name: str = "", tls_ca: str = "", overrides: Sequence[str] = (),
                          log: Callable[[str], None] = _say, allow_plaintext: bool = False) -> list[dict[str, Any]]:
    """An actor on another machine: join the learner at ``connect`` (host:port) and run the run's episodes.

    ``allow_plaintext`` (``--insecure``): connect without TLS to a non-loopback learner (else only
    ``ROBOT_RL_ALLOW_PLAINTEXT=1`` allows it; the run's config is not known before joining).
    """
    from robot_rl.fleet.fleet_status import this_host
    from robot_rl.fleet.remote_run import RemoteRun
    from robot_rl.fleet.wire import tls_client_context
    from robot_rl.learners.actor_process import run_remote_actor

    remote = RemoteRun(parse_address(connect), read_secret(secret_file), workdir, name or f"{this_host()}-{index or 0}",
                       tls_client_context(tls_ca) if tls_ca else None, {"host": this_host()},
                       allow_plaintext=True if allow_plaintext else None)  # None: the environment variable
    records = run_remote_actor(remote, index, list(overrides))
    who = name or (records[0]["actor"] if records else index)
    log(f"actor {who}: {sum(r['success'] for r in records)}/{len(records)} episodes succeeded")
    return records


def command(role: str, run: str | Path, *options: str) -> list[str]:
    """The command line that starts ``role`` on a run folder with this interpreter, as our child.

    The child stops when this process is gone (:func:`exit_with_parent`).
    """
    return [sys.executable, "-m", "robot_rl.learners.roles", role, "--run", str(run),
            "--exit-with-parent", str(os.getpid()), *options]


def exit_with_parent(parent: int, grace_s: float = 120.0, poll_s: float = 0.5) -> threading.Thread:
    """Stop this process once ``parent`` is gone (killed, crashed), so no learner or actor runs on orphaned.

    It gets SIGTERM, as from a user (the learner checkpoints, an actor ends its episode), and is killed
    if it has not exited ``grace_s`` later.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(f"parent process {parent} is gone: stopping", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(3)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def add_role_parsers(sub: Any) -> None:
    """The ``learner`` and ``actor`` sub-commands (shared with ``robot-rl online``)."""
    learner = sub.add_parser("learner", help="the learner process of a run folder")
    learner.add_argument("--run", required=True, help="run folder holding online.yaml")
    learner.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    actor = sub.add_parser("actor", help="one actor process of a run folder, or of a learner on another machine")
    actor.add_argument("--run", default=None, help="run folder holding online.yaml (a learner on this machine)")
    actor.add_argument("--index", type=int, default=None,
                       help="actor number (seeds, episode ids, log file); default 0, or with --connect the number the "
                            "learner gives this actor's name")
    actor.add_argument("--connect", default=None, metavar="HOST:PORT",
                       help="join the learner at HOST:PORT over TCP (its fleet.listen) instead of a run folder")
    actor.add_argument("--secret-file", default=None, help="copy of the run's learner.key (with --connect)")
    actor.add_argument("--workdir", default=None,
                       help="with --connect: folder for the received config and weights, the episode log and the "
                            "outbox of unacknowledged batches (default: ./robot_rl_actor)")
    actor.add_argument("--name", default="", help="actor id (default host-index); a replacement reuses it")
    actor.add_argument("--tls-ca", default="", help="with --connect: check the learner's TLS certificate against this")
    actor.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="with --connect: change this actor's copy of the config, e.g. actor.env_id=...")
    for role in (learner, actor):
        role.add_argument("--exit-with-parent", type=int, default=None, metavar="PID",
                          help="stop (as on SIGTERM) when process PID, the one that started this, is gone")


def run_role(args: argparse.Namespace) -> None:
    """Run the learner or actor role that parsed ``args`` name."""
    insecure = bool(getattr(args, "insecure", False))
    if args.role == "learner":
        run_learner(args.run, args.max_seconds, allow_plaintext=insecure)
    elif args.connect:
        if not args.secret_file:
            raise ValueError("actor --connect needs --secret-file (a copy of the run's learner.key)")
        run_remote_actor_role(args.connect, args.secret_file, args.workdir or "robot_rl_actor", args.index,
                              args.name, args.tls_ca, args.overrides, allow_plaintext=insecure)
    elif args.run:
        run_actor_role(args.run, args.index or 0)
    else:
        raise ValueError("actor: give --run FOLDER (this machine) or --connect HOST:PORT")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the child processes."""
    parser = argparse.ArgumentParser(prog="python -m robot_rl.learners.roles", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    add_role_parsers(sub)
    for role in sub.choices.values():  # here, not in add_role_parsers: robot-rl online adds its own --insecure
        role.add_argument("--insecure", action="store_true",
                          help="allow plaintext TCP on a non-loopback address (no TLS): robot data and weights cross "
                               "the network unencrypted; logged as an INSECURE warning")
    args = parser.parse_args(argv)
    if args.exit_with_parent is not None:
        exit_with_parent(args.exit_with_parent)
    try:
        run_role(args)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"{parser.prog} {args.role}: error: {exc}", file=sys.stderr)
        return 2
    except AuthError as exc:
        print(f"{parser.prog} {args.role}: the learner refused this actor: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
