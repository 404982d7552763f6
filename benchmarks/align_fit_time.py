"""Wall time of each stage of the quadrotor alignment test's fixture (tests/test_align_quad.py), one process.

Run: ``.venv/bin/python benchmarks/align_fit_time.py [--run /tmp/align_time] [--stages collect gap sysid ...]``.
Records on the test's "real robot" (collect), then times the nominal gap, each fit and the open-loop
evaluation, as the fixture runs them through ``robot-rl align``. Compare two checkouts by running this
script from each, back to back, on the same run folder (``--stages`` without ``collect`` reuses it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("collect", "gap", "sysid", "delta_dynamics", "delta_action", "eval")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="/tmp/align_time", help="run folder (created)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--ppo-steps", type=int, default=None, help="delta_action.ppo_steps (default: the config's)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from test_align_quad import REAL_ROBOT

    from robot_rl.cli.main import main as cli

    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((ROOT / "config" / "align" / "quad.yaml").read_text())
    cfg["collect"].update(env_id="robot_rl/QuadHover-v0", env_options={"randomization": REAL_ROBOT})
    if args.ppo_steps is not None:
        cfg["delta_action"]["ppo_steps"] = args.ppo_steps
    config = run / "quad.yaml"
    config.write_text(yaml.safe_dump(cfg))
    times = {}
    for stage in args.stages:
        action, extra = (stage, []) if stage in ("collect", "gap", "eval") else ("fit", ["--method", stage])
        t0 = time.perf_counter()
        code = cli(["align", action, "--config", str(config), "--run", str(run), "--no-progress", *extra])
        times[stage] = time.perf_counter() - t0
        if code != 0:
            raise SystemExit(f"{stage}: exit code {code}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()) + f"; total {sum(times.values()):.1f}")


if __name__ == "__main__":
    main()
