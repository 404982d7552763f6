"""The help of ``robot-rl``: one line per subcommand, and examples, as written, that the parser accepts."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from robot_rl.cli.main import COMMANDS, build_parser, example_blocks, subcommands


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser: the top one, each subcommand's and each action's, with its command prefix."""
    top = build_parser()
    yield "robot-rl", top
    for name, (cmd, _) in subcommands(top).items():
        yield f"robot-rl {name}", cmd
        for action, (parser, _) in subcommands(cmd).items():
            yield f"robot-rl {name} {action}", parser


PARSERS = dict(_parsers())


def _argv(block: str) -> list[str]:
    """An example as the shell would split it: continuation lines joined, the ``# comment`` dropped."""
    return shlex.split(re.sub(r"\\\n\s*", " ", block), comments=True)


def test_help_lists_one_line_per_subcommand() -> None:
    proc = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "--help"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    listing = proc.stdout.split("  COMMAND\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in listing] == list(COMMANDS), listing  # no help wrapped onto a 2nd line
    assert "\nexamples:\n  robot-rl doctor" in proc.stdout


@pytest.mark.parametrize("prefix", list(PARSERS))
def test_every_parser_shows_examples_as_written(prefix: str) -> None:
    parser = PARSERS[prefix]
    assert parser.formatter_class is argparse.RawDescriptionHelpFormatter
    assert parser.epilog and parser.epilog.startswith("examples:\n"), f"{prefix} --help has no examples"
    blocks = example_blocks(parser.epilog.removeprefix("examples:\n"))
    assert blocks and all(b.strip().startswith(prefix) for b in blocks)
    text = parser.format_help()
    for block in blocks:
        assert block in text, f"{prefix} --help rewraps its example:\n{block}"


def _examples() -> Iterator[tuple[str, str]]:
    """(where, command) for every example of every parser and every command line in a description."""
    for prefix, parser in PARSERS.items():
        for block in example_blocks((parser.epilog or "").removeprefix("examples:\n")):
            yield prefix, block.strip()
        for line in (parser.description or "").splitlines():
            if line.strip().startswith("robot-rl "):
                yield f"{prefix} (description)", line.strip()


@pytest.mark.parametrize(("where", "command"), list(_examples()))
def test_every_example_parses(where: str, command: str) -> None:
    """Each example is a command the parser accepts (parsed only, nothing runs): a missing required option
    or a renamed flag in an example fails here."""
    argv = _argv(command)
    assert argv[0] == "robot-rl", command
    parser = build_parser()
    if "--help" in argv:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv[1:])
        assert exit_.value.code == 0
        return
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{command}` does not parse (exit {exc.code})")
    assert args.command == argv[1] and callable(args._run)


def test_example_blocks_keep_continuations_together() -> None:
    text = "robot-rl a --x 1 \\\n    --y 2   # both\nrobot-rl b\n"
    assert example_blocks(text) == ["robot-rl a --x 1 \\\n    --y 2   # both", "robot-rl b"]
    assert _argv(example_blocks(text)[0]) == ["robot-rl", "a", "--x", "1", "--y", "2"]


REPO = Path(__file__).resolve().parents[1]
_PSEUDO = re.compile(r"<[^>]*>|\[--?\w| \| |\.\.\.")  # usage notation: <placeholder>, [--optional], a | b, ...


def _documented() -> Iterator[tuple[str, str]]:
    """(file, command) for each ``robot-rl`` command in an indented code line of the README and docs/."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]:
        if not path.is_file():
            continue
        text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
        for line in text.splitlines():
            match = re.match(r" {4}(?:scripts/setup\.sh && )?(?:\.venv/bin/)?(robot-rl( .*)?)$", line)
            if match and not _PSEUDO.search(match.group(1).split("#")[0]):
                yield path.relative_to(REPO).as_posix(), match.group(1)


@pytest.mark.parametrize(("where", "command"), list(_documented()))
def test_documented_commands_parse(where: str, command: str) -> None:
    """The commands the README and docs/ show (usage notation aside) are ones the parser accepts."""
    test_every_example_parses(where, command)
