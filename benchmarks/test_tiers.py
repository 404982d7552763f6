"""The test suite's two tiers, measured: the fast tier's wall time and whether it exercises every module.

    .venv/bin/python benchmarks/test_tiers.py                # fast tier timed, then again under coverage
    .venv/bin/python benchmarks/test_tiers.py --full         # and the whole suite, as CI runs it
    .venv/bin/python benchmarks/test_tiers.py --no-coverage  # only the times

The fast tier is ``pytest -m "not slow"`` (what a developer runs between edits); the full suite is the
README's test command. "Exercised" means more than imported: at least one function or method of the
module ran a line of its body, in the test process or in any process a test started (ROS nodes, actors,
learners: coverage's ``patch = subprocess``). Results go to ``benchmarks/test_tiers.json``.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="also time the whole suite (the README's command)")
    parser.add_argument("--no-coverage", action="store_true", help="skip the coverage run of the fast tier")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "test_tiers.json"))
    args = parser.parse_args()
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
        wall, summary = pytest([])
        result["full"] = {"wall_s": round(wall), "summary": summary}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "fast_coverage"}, indent=1))
    return 1 if result.get("fast_coverage", {}).get("not_exercised") else 0


if __name__ == "__main__":
    sys.exit(main())
