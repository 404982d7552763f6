r"""Entry point of ``robot-rl``: dispatch to the subcommand modules.

Each subcommand module defines ``HELP`` (one short line: ``robot-rl --help`` lists one line per subcommand),
``EXAMPLES`` (command lines as a user types them, each with an optional ``# comment``; a line ending in ``\``
goes on in the next), ``add_arguments(parser)`` and ``run(args) -> int``, and imports its heavy dependencies
inside ``run`` so that ``robot-rl --help`` stays fast. ``robot-rl <command> --help`` shows the module
docstring and the examples with their line breaks; an action's help (``robot-rl data record --help``) shows
the examples that run that action.
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

EXAMPLES = """\
robot-rl doctor                                           # what is installed, what is missing, how to fix it
robot-rl demo                                             # the main job, end to end
robot-rl data record --out data/pick.zarr --episodes 20   # scripted demonstrations in simulation
robot-rl data --help                                      # every subcommand has its own help and examples
"""

RAW = argparse.RawDescriptionHelpFormatter  # keeps the line breaks of descriptions and examples


def example_blocks(examples: str) -> list[str]:
    r"""The example commands of an EXAMPLES text, a command continued with ``\`` kept with its next lines."""
    blocks: list[str] = []
    for line in examples.strip("\n").splitlines():
        if blocks and blocks[-1].rstrip().split("#")[0].rstrip().endswith("\\"):
            blocks[-1] += "\n" + line
        elif line.strip():
            blocks.append(line)
    return blocks


def examples_epilog(examples: str, prefix: str) -> str | None:
    """An ``examples:`` block of the commands that start with ``prefix`` (None when none does)."""
    blocks = [b for b in example_blocks(examples) if b == prefix or b.startswith(prefix + " ")]
    if not blocks:
        return None
    return "examples:\n" + "\n".join("  " + b.replace("\n", "\n  ") for b in blocks)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """The parser's sub-commands: name -> (parser, one-line help); empty when it has none."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="robot-rl",
        description="robot_rl: robot learning on ROS 2 (simulation, compliant control, online fine-tuning).",
        epilog=examples_epilog(EXAMPLES, "robot-rl"), formatter_class=RAW,
    )
    parser.add_argument("--version", action="version", version=f"robot_rl {robot_rl.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        prefix = f"robot-rl {name}"
        # argparse %-formats help strings: escape so a "95% CI" in a HELP cannot break --help
        cmd = sub.add_parser(name, help=module.HELP.replace("%", "%%"), description=module.__doc__,
                             epilog=examples_epilog(module.EXAMPLES, prefix), formatter_class=RAW)
        module.add_arguments(cmd)
        for action, (action_parser, action_help) in subcommands(cmd).items():
            action_parser.formatter_class = RAW
            action_parser.description = action_parser.description or action_help
            action_parser.epilog = examples_epilog(module.EXAMPLES, f"{prefix} {action}")
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
