"""Property-based fuzzing of the CLI's arguments.

Every generated argument list ends with exit code 0, 1 or 2 and a one-line error (or argparse's usage), never
a traceback and never a hang, and leaves the stores and datasets it was pointed at byte for byte as they were.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.fuzz import exported_dataset, fuzz_settings, tally, tree_digest
from hypothesis import example, given
from hypothesis import strategies as st

SLOW_S = 20.0
"""Bound on one command (generous: the suite shares two cores with other test runs)."""


@pytest.fixture(scope="module")
def datasets(fuzz_work: Path) -> dict[str, Path]:
    """A tiny episode store and its LeRobot v3 export: inputs the CLI must never change."""
    store, dataset = exported_dataset(fuzz_work, "store")
    return {"dataset": dataset, "store": store}


CLI_ENTRY = "cli: arguments"
NUMBERS = st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e999", "99999999999999999999", "0x10", "1.5",
                           "", "abc", "-0", "3,1", "1,,x"])
BAD_ENVS = st.sampled_from(["", "robot_rl/Nope-v0", "nope", "robot_rl/ArmReach-v9", "gymnasium:x", "-", "a" * 300,
                            "robot_rl/ArmReach-v0:", "nope.module:Env-v0"])
TEXT = st.sampled_from(["", "-", "--", "x=y", "=", "a b", "\u00e9\u2028", "{", "[1, 2", "policy_hz=", "policy_hz=-1",
                        "policy_hz=nan", "randomization={", "nope=1", "data.fps=1e999"]) | st.text(max_size=8)


@pytest.fixture(scope="module")
def sandbox(fuzz_work: Path, datasets: dict[str, Path]) -> dict[str, str]:
    """Hostile paths: missing, too long, garbage files, an empty folder, a tiny valid store, a LeRobot folder."""
    root = fuzz_work / "cli"
    root.mkdir()
    (root / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (root / "bad.yaml").write_text("a: [1, 2\n")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "keys.yaml").write_text("nope: 1\nlr: 1e999\nsteps: -5\n")
    (root / "empty.txt").write_text("")
    (root / "folder").mkdir()
    return {"missing": str(root / "missing" / "x"), "long": str(root / ("n" * 300)),
            "garbage": str(root / "garbage.bin"), "bad_yaml": str(root / "bad.yaml"),
            "list_yaml": str(root / "list.yaml"), "keys_yaml": str(root / "keys.yaml"),
            "empty": str(root / "empty.txt"), "folder": str(root / "folder"), "store": str(datasets["store"]),
            "lerobot": str(datasets["dataset"]), "unicode": str(root / "\u00e9\u2028\U0001f600")}


@st.composite
def cli_args(draw: st.DrawFn, paths: dict[str, str]) -> list[str]:
    """One argument list for a subcommand that fails fast (no training, recording or rollout can start)."""
    path = st.sampled_from(sorted(paths.values()))
    bad = st.sampled_from([v for k, v in sorted(paths.items()) if k not in ("store", "lerobot")])
    new = st.integers(0, 10**6).map(lambda i: str(Path(paths["folder"]) / f"new{i}"))
    out = new | bad
    opt = draw(st.lists(st.sampled_from(["--json", "--no-progress", "--bogus", "--", "-x", "--out=", "-h"]),
                        max_size=1))
    kind = draw(st.sampled_from(["data info", "data validate", "data stats", "data plot", "data export",
                                 "data import", "data record", "train", "eval", "sim rollout", "sim", "rl train",
                                 "online status", "online run", "align", "launch", "top", "nonsense"]))
    a: list[str]
    if kind in ("data info", "data validate"):
        a = [*kind.split(), draw(path)]
    elif kind == "data stats":
        a = ["data", "stats", draw(path), "--out", draw(out)]
    elif kind == "data plot":
        a = ["data", "plot", draw(path), "--out", draw(out), "--episodes", draw(NUMBERS)]
    elif kind == "data export":
        a = ["data", "export", draw(path), "--out", draw(new), "--episodes", draw(NUMBERS),
             *draw(st.sampled_from([[], ["--encoder", "nope"], ["--encoder", ""]]))]
    elif kind == "data import":
        a = ["data", "import", draw(st.sampled_from(["lerobot", "bag", "zarr"])), draw(path), "--out", draw(out),
             *draw(st.sampled_from([[], ["--mapping", draw(path)]]))]
    elif kind == "data record":
        a = ["data", "record", "--out", draw(new), "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS),
             "--override", draw(TEXT), *draw(st.sampled_from([[], ["--import", draw(TEXT)],
                                                              ["--noise-dims", draw(NUMBERS)]]))]
    elif kind == "train":
        a = ["train", draw(bad), "--out", draw(out), "--set", draw(TEXT),
             *draw(st.sampled_from([[], ["--dataset", draw(path)], ["--device", draw(TEXT)]]))]
    elif kind == "eval":
        a = ["eval", draw(bad), "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS), "--workers", draw(NUMBERS)]
    elif kind == "sim rollout":
        a = ["sim", "rollout", "--env", draw(BAD_ENVS), "--episodes", draw(NUMBERS), "--seed", draw(NUMBERS),
             "--override", draw(TEXT)]
    elif kind == "sim":
        a = ["sim", *draw(st.sampled_from([[], ["list"], ["nope"]]))]
    elif kind == "rl train":
        a = ["rl", "train", draw(bad), "--out", draw(out), "--set", draw(TEXT)]
    elif kind == "online status":
        a = ["online", "status", draw(path)]
    elif kind == "online run":  # a config that never loads: an empty --config would start the default run
        a = ["online", "run", "--config", draw(bad.filter(bool)), "--run", draw(out), "--seconds", draw(NUMBERS)]
    elif kind == "align":
        a = ["align", draw(st.sampled_from(["collect", "gap", "fit", "eval", "finetune", "nope"])), "--config",
             draw(bad), "--run", draw(out)]
    elif kind == "launch":  # --print: resolve the file only, start nothing
        a = ["launch", draw(bad), "--print", *draw(st.lists(TEXT, max_size=2))]
    elif kind == "top":
        a = draw(st.sampled_from([[], ["--version"], ["--help"], ["-h"], ["--bogus"]]))
    else:
        a = [draw(TEXT)]
    return [*a, *opt]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``robot-rl argv`` in process: its exit code and everything it printed; raises on a hang."""
    import contextlib
    import io
    import signal

    from robot_rl.cli.main import main

    def hang(*_: Any) -> None:
        raise TimeoutError(f"robot-rl {argv} hung")

    buffer = io.StringIO()
    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, SLOW_S)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            try:
                code: int | str | None = main(argv)
            except SystemExit as exc:  # argparse (usage: 2, --help: 0) or a SystemExit("error: ...") (1)
                code = exc.code
                if isinstance(code, str):
                    print(code, file=sys.stderr)
                    code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return int(code or 0), buffer.getvalue()


FOUND = [["data", "info", "{long}"], ["data", "record", "--out", "{missing}", "--env", ""],
         ["data", "record", "--out", "{missing}", "--import", ""], ["data", "plot", "{store}", "--out", "{missing}",
                                                                     "--episodes", "nan"],
         ["launch", "{garbage}", "--print"], ["launch", "{bad_yaml}", "--print"], ["launch", "{folder}", "--print"],
         ["data", "export", "{store}", "--out", "{missing}", "--encoder", "nope"],
         ["sim", "rollout", "--env", "nope", "--override", "randomization={{"],
         ["sim", "rollout", "--env", "robot_rl/ArmReach-v0:", "--override", "policy_hz="],
         ["train", "{bad_yaml}", "--out", "{missing}", "--set", "randomization={{"],
         ["rl", "train", "{keys_yaml}", "--out", "{missing}", "--set", "ppo={{"]]
"""Inputs that once raised a traceback (in the order found)."""


@pytest.mark.slow
@fuzz_settings(150)
@given(data=st.data())
@example(data=None)
def test_cli_hostile_arguments_fail_cleanly(sandbox: dict[str, str], data: st.DataObject | None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(sandbox["folder"]))  # a relative or empty path never touches the repository
    if data is None:
        for argv in FOUND:
            check_cli([a.format(**sandbox) for a in argv], sandbox)
        return
    check_cli(data.draw(cli_args(sandbox), label="argv"), sandbox)


def check_cli(argv: list[str], sandbox: dict[str, str]) -> None:
    inputs = [Path(sandbox["store"]), Path(sandbox["lerobot"])]
    before = [tree_digest(path) for path in inputs]
    code, output = run_cli(argv)
    assert "Traceback" not in output, output
    assert code in (0, 1, 2), (code, output)
    lines = [line for line in output.splitlines() if line.strip()]
    if code and not any(line.startswith("usage:") for line in lines):
        errors = [line for line in lines if any(w in line.lower() for w in ("error", "issue", "stopped"))]
        assert errors, f"exit {code} without an error line: {output!r}"
    assert [tree_digest(path) for path in inputs] == before, "the CLI changed an input"
    tally(CLI_ENTRY, "accepted" if code == 0 else f"refused: exit {code}")
