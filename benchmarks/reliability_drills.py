"""Reliability drill: every fuzzed entry point at >= 10 000 generated inputs, and every fault drill, in one run.

Runs the suite's own fuzz tests (any test file that uses ``fuzz_settings``) with ``ROBOT_RL_FUZZ_CASES``
inputs per test, freshly random (the suite runs a few hundred, derandomized), and the fault drills (any
test file that calls ``record_fault``), with ``ROBOT_RL_DRILL_TALLY`` pointing at a results folder. The
tests themselves assert the properties (a clear one-line error or a refusal, no crash, no hang, nothing
stored lost or changed; the robot held or damped); this script runs them and tabulates what they counted.

    python benchmarks/reliability_drills.py                  # everything, 10 000 inputs per test
    python benchmarks/reliability_drills.py --cases 300 -k vendor   # a quick look at a subset

Writes benchmarks/reliability_drills.json and benchmarks/reliability_drills.md (the table in README.md and
benchmarks/README.md). Pytest's own progress lines are shown as the run goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]


def discover(pattern: str) -> list[str]:
    """Test files whose text contains ``pattern`` (the helpers' names: fuzz_settings / record_fault)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                  if re.search(pattern, p.read_text(encoding="utf-8")))


def run_pytest(files: list[str], tally: Path, cases: int, keyword: str | None, timeout_s: float) -> tuple[int, float]:
    """Run pytest on ``files`` with the drill's environment; returns (exit code, seconds). Each test's outcome
    goes to ``tally``/junit.xml (:func:`test_outcomes`)."""
    env = dict(os.environ, ROBOT_RL_FUZZ_CASES=str(cases), ROBOT_RL_DRILL_TALLY=str(tally))
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-v", "-p", "no:cacheprovider", "--timeout",
           str(int(timeout_s)), f"--junitxml={tally / 'junit.xml'}", *files]
    if keyword:
        cmd += ["-k", keyword]
    t0 = time.perf_counter()
    code = subprocess.call(cmd, cwd=ROOT, env=env)
    return code, time.perf_counter() - t0


def collect(tally: Path) -> tuple[dict[str, dict[str, int]], list[dict[str, object]]]:
    """Per entry point {outcome: count}, and the fault records, from every process's files."""
    inputs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    faults: list[dict[str, object]] = []
    for path in sorted(tally.glob("tally-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            inputs[row["entry_point"]][row["outcome"]] += int(row["count"])
    for path in sorted(tally.glob("faults-*.jsonl")):
        faults += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {k: dict(v) for k, v in sorted(inputs.items())}, faults


def test_outcomes(junit: Path) -> dict[str, str]:
    """{test id: passed | failed | skipped} from pytest's JUnit XML."""
    import xml.etree.ElementTree as ET

    out: dict[str, str] = {}
    if not junit.is_file():
        return out
    for case in ET.parse(junit).iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        out[test] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return out


def table(inputs: dict[str, dict[str, int]], faults: list[dict[str, object]], summary: dict[str, object]) -> str:
    """The markdown tables of the README."""
    fixed = cast("list[str]", summary.get("rerun_after_fix") or [])
    held = ("Every row's property held for every input: a clear one-line error or refusal, no crash of a "
            "long-running process, bounded time, nothing stored changed." if not summary["exit_code"] else
            "Some inputs failed the property: see the run's log (pytest prints each falsifying input).")
    if fixed and not summary["exit_code"]:
        held += (f" Tests that failed in an earlier part and passed when rerun after their fix (the rerun's counts "
                 f"replace the earlier ones): {', '.join(t.split('::')[-1] for t in fixed)}.")
    runs = cast("list[str]", summary.get("runs")) or [
        f"{summary['cases']} generated inputs per fuzz test, pytest exit code {summary['exit_code']}, "
        f"{summary['minutes']:.0f} min"]
    lines = [f"Drill of {summary['date']} on {summary['cpus']} CPU cores: " + "; ".join(runs) + ". " + held, "",
             "| entry point | inputs | outcomes |", "|---|---:|---|"]
    for entry, outcomes in inputs.items():
        total = sum(outcomes.values())
        detail = ", ".join(f"{name} {n}" for name, n in sorted(outcomes.items(), key=lambda kv: -kv[1]))
        lines.append(f"| {entry} | {total:,} | {detail} |")
    lines += ["", "By kind of entry point:", "", "| kind | entry points | inputs | fewest per entry point | refused |",
              "|---|---:|---:|---:|---:|"]
    groups: dict[str, list[dict[str, int]]] = defaultdict(list)
    for entry, outcomes in inputs.items():
        groups[entry.split(":")[0]].append(outcomes)
    for kind, members in sorted(groups.items()):
        totals = [sum(o.values()) for o in members]
        refused = sum(n for o in members for name, n in o.items() if "refused" in name or "denied" in name)
        lines.append(f"| {kind} | {len(members)} | {sum(totals):,} | {min(totals):,} | "
                     f"{100 * refused / max(sum(totals), 1):.0f} % |")
    lines += ["", "| fault | what happened | recovery | lost | robot |", "|---|---|---:|---|---|"]
    for f in faults:
        rec = "-" if f.get("recovery_s") is None else f"{float(f['recovery_s']):.2f} s"  # type: ignore[arg-type]
        lines.append(f"| {f['fault']} | {f['happened']} | {rec} | {f['lost']} | {f['robot']} |")
    return "\n".join(lines) + "\n"


def write(out: Path, summary: dict[str, object], inputs: dict[str, dict[str, int]],
          faults: list[dict[str, object]]) -> None:
    """``out``.json (everything) and ``out``.md (the tables), and the tables on stdout."""
    out.with_suffix(".json").write_text(json.dumps({"summary": summary, "inputs": inputs, "faults": faults},
                                                   indent=1), encoding="utf-8")
    text = table(inputs, faults, summary)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)


def _what_ran(summary: dict[str, object]) -> str:
    """A part's tests in a few words: its -k expression if it had one, else its files."""
    keyword = summary.get("keyword")
    return f"-k {keyword!r}" if keyword else ", ".join(Path(str(f)).stem for f in cast("list[str]", summary["files"]))


def combine(parts: list[Path], out: Path) -> int:
    """One table from partial runs (e.g. the fuzz tests and the fault drills run apart).

    A later part supersedes an earlier one where they overlap: its counts replace the earlier counts of every
    entry point it tallied, and a test that failed earlier but passed in the later part (rerun after a fix) no
    longer fails the combined run. A part without per-test outcomes that failed fails the combined run.
    """
    inputs: dict[str, dict[str, int]] = {}
    faults: list[dict[str, object]] = []
    outcomes_by_test: dict[str, str] = {}
    failed_unknown = False
    rerun: list[str] = []
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in parts]
    for run in runs:
        inputs.update({entry: dict(counts) for entry, counts in run["inputs"].items()})
        faults += run["faults"]
        tests = run["summary"].get("tests")
        if tests is None:
            failed_unknown |= bool(run["summary"]["exit_code"])
            continue
        for test, outcome in tests.items():
            if outcomes_by_test.get(test) == "failed" and outcome == "passed":
                rerun.append(test)
            outcomes_by_test[test] = outcome
    code = int(failed_unknown or "failed" in outcomes_by_test.values())
    summary = {"date": max(r["summary"]["date"] for r in runs), "cases": min(r["summary"]["cases"] for r in runs),
               "exit_code": code, "failed": "some" if code else "none",
               "minutes": sum(r["summary"]["minutes"] for r in runs), "cpus": os.cpu_count(),
               "files": sorted({f for r in runs for f in r["summary"]["files"]}), "parts": [str(p) for p in parts],
               "tests": outcomes_by_test, "rerun_after_fix": rerun,
               "runs": [f"{_what_ran(r['summary'])} at {r['summary']['cases']} inputs per entry point "
                        f"(exit code {r['summary']['exit_code']}, {r['summary']['minutes']:.0f} min)" for r in runs]}
    write(out, summary, dict(sorted(inputs.items())), faults)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000,
                        help="generated inputs per entry point (a test sharing one with others runs its share)")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression to run a subset")
    parser.add_argument("--no-faults", action="store_true", help="fuzz tests only")
    parser.add_argument("--no-fuzz", action="store_true", help="fault drills only")
    parser.add_argument("--timeout", type=float, default=7200, help="per-test timeout [s] (a hang fails the run)")
    parser.add_argument("--combine", type=Path, nargs="+", default=None,
                        help="instead of running: merge the .json results of several partial runs into one table")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "reliability_drills",
                        help="output stem (.json, .md)")
    args = parser.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)
    files: list[str] = []
    if not args.no_fuzz:
        files += discover(r"fuzz_settings\(")
    if not args.no_faults:
        files += [f for f in discover(r"record_fault\(") if f not in files]
    with tempfile.TemporaryDirectory(prefix="robot_rl_drill_") as folder:
        tally = Path(folder)
        code, seconds = run_pytest(files, tally, args.cases, args.keyword, args.timeout)
        inputs, faults = collect(tally)
        tests = test_outcomes(tally / "junit.xml")
    summary = {"date": time.strftime("%Y-%m-%d"), "cases": args.cases, "exit_code": code,
               "failed": "some" if code else "none", "minutes": seconds / 60, "cpus": os.cpu_count(),
               "files": files, "keyword": args.keyword, "tests": tests}
    write(args.out, summary, inputs, faults)
    short = [e for e, o in inputs.items() if sum(o.values()) < 10_000]
    if short and args.cases >= 10_000:
        print(f"note: under 10 000 inputs (hypothesis exhausted a small input space): {short}")
    return code


if __name__ == "__main__":
    sys.exit(main())
