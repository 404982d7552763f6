"""The two process roles of an online run, as functions and as a runnable module.

    python -m robot_rl.learners.roles learner --run runs/online [--max-seconds 600]
    python -m robot_rl.learners.roles actor --run runs/online --index 1

Both read the run folder's ``online.yaml``. :func:`robot_rl.learners.online.run_online` starts its
child processes with this module, so the core never goes back through the command line; ``robot-rl
online learner|actor`` calls the same functions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from robot_rl.core.config import ConfigError, load_config
from robot_rl.learners.online_config import OnlineConfig

CONFIG_FILE = "online.yaml"
"""The run folder's config, written by whoever starts the run and read by every role."""


def _say(line: str) -> None:
    print(line, flush=True)


def load_run_config(run: str | Path) -> OnlineConfig:
    """The config of a run folder (raises ``FileNotFoundError`` or ``ConfigError``)."""
    return load_config(OnlineConfig, Path(run) / CONFIG_FILE)


def run_learner(run: str | Path, max_seconds: float | None = None,
                log: Callable[[str], None] = _say) -> dict[str, Any]:
    """Serve a run folder's learner until stopped; returns its final counters."""
    from robot_rl.learners.learner_process import OnlineLearner

    learner = OnlineLearner(load_run_config(run), Path(run))
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


def command(role: str, run: str | Path, *options: str) -> list[str]:
    """The command line that starts ``role`` on a run folder with this interpreter."""
    return [sys.executable, "-m", "robot_rl.learners.roles", role, "--run", str(run), *options]


def add_role_parsers(sub: Any) -> None:
    """The ``learner`` and ``actor`` sub-commands (shared with ``robot-rl online``)."""
    learner = sub.add_parser("learner", help="the learner process of a run folder")
    learner.add_argument("--run", required=True, help="run folder holding online.yaml")
    learner.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    actor = sub.add_parser("actor", help="one actor process of a run folder")
    actor.add_argument("--run", required=True, help="run folder holding online.yaml")
    actor.add_argument("--index", type=int, default=0, help="actor number (seeds, log file)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the child processes."""
    parser = argparse.ArgumentParser(prog="python -m robot_rl.learners.roles", description=__doc__.split("\n")[0])
    add_role_parsers(parser.add_subparsers(dest="role", required=True))
    args = parser.parse_args(argv)
    try:
        if args.role == "learner":
            run_learner(args.run, args.max_seconds)
        else:
            run_actor_role(args.run, args.index)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"{parser.prog} {args.role}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
