"""Entry point of ``robot-rl``: dispatch to the subcommand modules.

Each subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``
and imports its heavy dependencies inside ``run`` so that ``robot-rl --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

import robot_rl

# Subcommand name -> module.
COMMANDS: dict[str, str] = {
    "doctor": "robot_rl.cli.doctor",
    "demo": "robot_rl.cli.demo",
    "launch": "robot_rl.cli.launch",
    "data": "robot_rl.cli.data",
    "train": "robot_rl.cli.train",
    "eval": "robot_rl.cli.eval",
    "online": "robot_rl.cli.online",
    "sim": "robot_rl.cli.sim",
    "rl": "robot_rl.cli.rl",
    "align": "robot_rl.cli.align",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="robot-rl",
        description="robot_rl: robot learning on ROS 2 (simulation, compliant control, online fine-tuning).",
    )
    parser.add_argument("--version", action="version", version=f"robot_rl {robot_rl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        # argparse %-formats help strings: escape so a "95% CI" in a HELP cannot break --help
        cmd = sub.add_parser(name, help=module.HELP.replace("%", "%%"), description=module.__doc__)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def restore_interrupt() -> None:
    """Make SIGINT raise KeyboardInterrupt again if it was inherited as ignored.

    A shell starts background jobs (``cmd &`` in a script, nohup) with SIGINT ignored, and ignored
    signals survive ``exec``: ``robot-rl data record`` would not stop on Ctrl-C and every node that
    ``robot-rl launch`` starts would ignore the SIGINT of a clean shutdown. A handler (unlike SIG_IGN)
    is reset to the default in each child.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; returns the process exit code."""
    restore_interrupt()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except OSError as exc:  # a path the system refuses (too long, not a folder, no permission): one line, no traceback
        print(f"robot-rl {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
