"""The test suite's two tiers, measured: the fast tier's wall time and whether it exercises every module.

    .venv/bin/python benchmarks/test_tiers.py                # fast tier timed, then again under coverage
    .venv/bin/python benchmarks/test_tiers.py --full         # and the whole suite, as CI runs it
    .venv/bin/python benchmarks/test_tiers.py --no-coverage  # only the times
    .venv/bin/python benchmarks/test_tiers.py --durations-from LOG  # tests/module_durations.json from a CPU log

The fast tier is ``pytest -m "not slow"`` (what a developer runs between edits); the full suite is the
README's test command. "Exercised" means more than imported: at least one function or method of the
module ran a line of its body, in the test process or in any process a test started (ROS nodes, actors,
learners: coverage's ``patch = subprocess``). Results go to ``benchmarks/test_tiers.json``.

``--full`` logs every test (``ROBOT_RL_TEST_CPU_LOG``) and writes ``tests/module_durations.json``, the order in
which pytest-xdist hands modules out (longest first), and checks the schedule: how long realtime tests held the
machine, how busy the workers were, and that no test ran beside a ``realtime`` test that has the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
FAST = ["-m", "not slow"]
RCFILE = """\
[run]
source = robot_rl
parallel = True
patch = subprocess
sigterm = true
concurrency = thread, multiprocessing
data_file = {data}
"""


def pytest(args: list[str], env: dict[str, str] | None = None, coverage_rc: Path | None = None) -> tuple[float, str]:
    """Run pytest in the repository root; (wall seconds, its last summary line)."""
    head = [PY, "-m", "coverage", "run", f"--rcfile={coverage_rc}", "-m", "pytest"] if coverage_rc else \
        [PY, "-m", "pytest"]
    cmd = [*head, "-p", "no:cacheprovider", "-q", *args]
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    wall = time.monotonic() - t0
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    summary = lines[-1] if lines else done.stderr[-500:]
    print(f"  {wall:.0f} s: {summary}", flush=True)
    for line in lines:
        if line.startswith(("FAILED", "ERROR")):
            print("  " + line, flush=True)
    return wall, summary


def exercised(report: dict) -> dict[str, dict]:
    """Per module of robot_rl: statements, executed, and whether any function body ran."""
    out = {}
    for path, data in sorted(report["files"].items()):
        functions = {name: f for name, f in data.get("functions", {}).items() if name}  # "" is module level
        stats = data["summary"]
        if not stats["num_statements"]:
            ran = True  # a package marker with a docstring: nothing to run
        elif functions:
            ran = any(f["executed_lines"] for f in functions.values())
        else:
            ran = stats["covered_lines"] > 0
        out[path] = {"statements": stats["num_statements"], "covered_percent": round(stats["percent_covered"], 1),
                     "functions": len(functions), "exercised": ran}
    return out


DURATIONS = ROOT / "tests" / "module_durations.json"


def module_seconds(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Seconds per test module (its tests' setup, call and teardown, without waits for the machine share) and
    those of its realtime tests, longest module first."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        module = out.setdefault(row["test"].split("::")[0], {"seconds": 0.0, "realtime_s": 0.0})
        module["seconds"] += row["wall"]
        module["realtime_s"] += row["wall"] if row.get("realtime") is not None else 0.0
    return {m: {k: round(v, 1) for k, v in row.items()}
            for m, row in sorted(out.items(), key=lambda kv: -kv[1]["seconds"])}


def schedule(rows: list[dict]) -> dict:
    """What the machine share did in one parallel run: span, busy time per worker, realtime time, and the
    tests that overlapped a test they must not run beside (there must be none): another realtime test, or,
    when realtime tests had the machine to themselves (share "exclusive"), any test beside a ``machine`` one."""
    span = max(r["start"] + r["wall"] for r in rows) - min(r["start"] for r in rows)
    busy: dict[str, float] = {}
    for row in rows:
        busy[row["worker"]] = busy.get(row["worker"], 0.0) + row["wall"]
    machine = [r for r in rows if r.get("realtime") == "machine"]
    shares = sorted({str(r.get("share")) for r in rows})

    def apart(a: dict, b: dict) -> bool:
        if b.get("realtime") is not None:
            return True
        return a.get("realtime") == "machine" and a.get("share", "exclusive") != "background"

    realtime = [r for r in rows if r.get("realtime") is not None]
    overlaps = [(a["test"], b["test"]) for a in realtime for b in rows if b is not a and b["worker"] != a["worker"]
                and apart(a, b) and b["start"] < a["start"] + a["wall"] and a["start"] < b["start"] + b["wall"]]
    return {"span_s": round(span), "share": shares, "busy_s": {w: round(v) for w, v in sorted(busy.items())},
            "realtime_machine_s": round(sum(r["wall"] for r in machine)),
            "realtime_beside_s": round(sum(r["wall"] for r in rows if r.get("realtime") == "beside")),
            "overlapping_tests": overlaps[:10]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="also time the whole suite (the README's command)")
    parser.add_argument("--no-coverage", action="store_true", help="skip the coverage run of the fast tier")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "test_tiers.json"))
    parser.add_argument("--durations-from", metavar="LOG", help="only write tests/module_durations.json from a "
                        "ROBOT_RL_TEST_CPU_LOG file of a full parallel run")
    args = parser.parse_args()
    if args.durations_from:
        rows = [json.loads(line) for line in Path(args.durations_from).read_text().splitlines() if line.strip()]
        DURATIONS.write_text(json.dumps(module_seconds(rows), indent=1) + "\n")
        print(json.dumps(schedule(rows), indent=1))
        return 0
    result: dict = {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    wall, summary = pytest(FAST)
    result["fast"] = {"wall_s": round(wall), "summary": summary}
    if not args.no_coverage:
        with tempfile.TemporaryDirectory() as tmp:
            rc = Path(tmp) / "coveragerc"
            data = Path(tmp) / ".coverage"
            rc.write_text(RCFILE.format(data=data))
            wall, summary = pytest(FAST, env={"COVERAGE_RCFILE": str(rc)}, coverage_rc=rc)
            subprocess.run([PY, "-m", "coverage", "combine", f"--rcfile={rc}", "-q"], cwd=ROOT, check=True)
            subprocess.run([PY, "-m", "coverage", "json", f"--rcfile={rc}", "-q", "-o", str(Path(tmp) / "c.json")],
                           cwd=ROOT, check=True)
            modules = exercised(json.loads((Path(tmp) / "c.json").read_text()))
        missing = sorted(m for m, v in modules.items() if not v["exercised"])
        result["fast_coverage"] = {"wall_s": round(wall), "summary": summary, "modules": len(modules),
                                   "not_exercised": missing,
                                   "lowest": sorted((v["covered_percent"], m) for m, v in modules.items())[:10]}
        print(f"fast tier exercises {len(modules) - len(missing)} of {len(modules)} modules"
              + (f"; not: {', '.join(missing)}" if missing else ""))
    if args.full:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "tests.jsonl"
            wall, summary = pytest([], env={"ROBOT_RL_TEST_CPU_LOG": str(log)})
            rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        DURATIONS.write_text(json.dumps(module_seconds(rows), indent=1) + "\n")
        result["full"] = {"wall_s": round(wall), "summary": summary, "schedule": schedule(rows)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "fast_coverage"}, indent=1))
    return 1 if result.get("fast_coverage", {}).get("not_exercised") else 0


if __name__ == "__main__":
    sys.exit(main())
