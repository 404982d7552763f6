"""Wall time of the three evaluations of a ``robot-rl demo`` run, with 1 or more processes, and their reports.

Run: ``.venv/bin/python benchmarks/demo_eval_time.py --run /tmp/demo --workers 1 2 1 2``, on the output folder
of a finished ``robot-rl demo`` (the test's settings: ``--episodes 20 --bc-steps 1000 --eval-episodes 20
--online-episodes 100 --rl-seconds 45``). Re-runs its "evaluation", "evaluation 2" and "evaluation 3" stages
(``Demo.evaluate``: the behaviour-cloned policy, the newest HG-DAgger weights, the newest DSRL noise actor) once
per ``--workers`` value, in that order, into ``<out>/w<N>_<k>/eval_<name>/eval.json``, and prints each stage's
time and whether every per-episode field equals the run's own ``eval.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SAME = ["seeds", "successes", "returns", "lengths", "failures", "metrics"]
"""The per-episode fields of a report (``seconds`` and ``policy_ms_per_step`` are times)."""


def main() -> None:
    from robot_rl.cli.demo import Demo, DemoSettings
    from robot_rl.runtime.weights import list_versions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="output folder of a finished robot-rl demo")
    parser.add_argument("--out", type=Path, default=Path("/tmp/demo_eval_time"), help="folder for the reports")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--episodes", type=int, default=20, help="evaluation episodes (the demo's --eval-episodes)")
    args = parser.parse_args()
    fine_tuned = list_versions(args.run / "online" / "weights")[-1][1]
    stages = {"before": {"policy_dir": args.run / "bc" / "policy"}, "after": {"policy_dir": fine_tuned},
              "rl": {"rl_run": args.run / "rl"}}
    for k, workers in enumerate(args.workers):
        demo = Demo(DemoSettings(out=args.out / f"w{workers}_{k}", eval_episodes=args.episodes, eval_workers=workers))
        total = 0.0
        for name, where in stages.items():
            t0 = time.perf_counter()
            report = demo.evaluate(name, **where)
            dt = time.perf_counter() - t0
            total += dt
            saved = json.loads((args.run / f"eval_{name}" / "eval.json").read_text(encoding="utf-8"))
            mine = report.to_json()
            same = all(mine[f] == saved[f] for f in SAME)
            print(f"workers={workers} {name:<7} {dt:6.1f} s  success {sum(report.successes)}/{len(report.successes)}"
                  f"  {'identical to' if same else 'DIFFERS from'} {args.run / f'eval_{name}'}", flush=True)
        print(f"workers={workers} total   {total:6.1f} s", flush=True)


if __name__ == "__main__":  # the evaluation's worker processes (spawn) import this module again
    main()
