"""From a nominal-sim policy to the "real" robot: HG-DAgger in a randomised simulator, then on the robot.

    .venv/bin/python benchmarks/arm_real_workflow.py --policy <the demo's HG-DAgger policy> \\
        --demos <its demonstrations> --out outputs/bench_real

Stage 1 runs config/learners/online_pick_lift_randomized.yaml for ``--sim-episodes`` (simulator only: no
real data); stage 2 runs config/learners/online_pick_lift_real.yaml on the real env (``--real-env``, by
default robot_rl/ArmPickLift-RealStandIn-v0; ``--real-options`` a JSON of env options for a robot of your
own) for the rest of ``--budget-s`` of wall time. Every published version is kept; versions spread over
both stages are evaluated without the human on ``--curve-episodes`` unseen seeds of the real env, the last
one on ``--eval-episodes``. Writes ``result.json`` and ``curve.png`` (success against real env steps and
wall time, the human's share of real steps). Wall time counts both stages, not the evaluations.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pick_lift_online import ROOT, human_curve, last_quarter_share, plot, success_rate

from robot_rl.core.config import load_config
from robot_rl.learners.actor_process import published_marker
from robot_rl.learners.online import run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.weights import list_versions

STAGES = (("randomised sim", "online_pick_lift_randomized.yaml"), ("real robot", "online_pick_lift_real.yaml"))


def stage_config(name: str, policy: str, demos: str, overrides: list[str]) -> OnlineConfig:
    """A stage's shipped config with the run's policy, demonstrations and every version kept."""
    return load_config(OnlineConfig, ROOT / "config" / "learners" / name,
                       [f"learner.keep_versions={10**6}", f"policy={policy}", f"learner.demos={demos}", *overrides])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", required=True, help="the nominal-sim policy to start from")
    parser.add_argument("--demos", required=True, help="its demonstrations (episode store)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=1800.0, help="wall time of both stages together")
    parser.add_argument("--sim-episodes", type=int, default=300, help="stage 1 episodes (0 skips it)")
    parser.add_argument("--real-env", default="robot_rl/ArmPickLift-RealStandIn-v0")
    parser.add_argument("--real-options", default="{}", help="JSON env options of the real env")
    parser.add_argument("--real-robot", default="", help="a robot only the tests define (tests/helpers/real_robots.py: "
                        "R2, R3): the nominal env with its perturbation set (wins over --real-env/--real-options)")
    parser.add_argument("--curve-episodes", type=int, default=30)
    parser.add_argument("--curve-points", type=int, default=3, help="versions evaluated per stage")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--eval-seed", type=int, default=700_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.real_robot:
        sys.path.insert(0, str(ROOT / "tests"))
        from helpers.real_robots import NOMINAL_ENV, env_options

        args.real_env, args.real_options = NOMINAL_ENV, json.dumps(env_options(args.real_robot))
    out = Path(args.out)
    real = [f"actor.env_id={args.real_env}", f"actor.env_options={args.real_options}", f"actor.episodes={10**6}"]
    sim = [f"actor.episodes={args.sim_episodes}"]
    t0, policy = time.perf_counter(), args.policy
    stages: list[dict[str, Any]] = []
    for (label, config), extra in zip(STAGES, (sim, real)):
        if label == STAGES[0][0] and args.sim_episodes == 0:
            continue
        cfg = stage_config(config, policy, args.demos, extra)
        left = args.budget_s - (time.perf_counter() - t0)
        run = out / label.replace(" ", "_")
        start = time.perf_counter() - t0
        result = run_online(cfg, run, budget_s=left, timeout=left + 900)
        versions = list_versions(run / "weights", published_marker(cfg))
        stages.append({"label": label, "run": run, "cfg": cfg, "start_s": start, "result": result,
                       "versions": versions})
        policy = str(versions[-1][1])
    real_cfg = stages[-1]["cfg"]  # the robot stage always runs, last
    seconds = time.perf_counter() - t0
    curve = [{"stage": "start", "version": 0, "env_steps": 0, "wall_s": 0.0,
              "success": success_rate(_as(real_cfg, args.policy), None, args.curve_episodes, args.eval_seed)}]
    for s in stages:
        log = {int(line["version"]): line for line in s["result"].learner if "error" not in line}
        versions = s["versions"]
        picks = [versions[int(i)] for i in np.unique(np.linspace(0, len(versions) - 1, args.curve_points).round())]
        t_start = s["result"].episodes[0]["t"] - s["result"].episodes[0]["seconds"]
        for version, folder in picks:
            line = log.get(version, {})
            real_steps = int(line.get("steps", 0)) if s["cfg"] is real_cfg else 0
            curve.append({"stage": s["label"], "version": version, "env_steps": real_steps,
                          "wall_s": s["start_s"] + float(line.get("t", t_start) - t_start),
                          "success": success_rate(_as(real_cfg, str(folder)), None, args.curve_episodes,
                                                  args.eval_seed)})
            print(curve[-1], flush=True)
    final = success_rate(_as(real_cfg, policy), None, args.eval_episodes, args.eval_seed)
    real_result = stages[-1]["result"]
    episodes = real_result.episodes
    t_real = episodes[0]["t"] - episodes[0]["seconds"] if episodes else 0.0
    summary: dict[str, Any] = {
        "label": "randomised-sim HG-DAgger -> real-robot HG-DAgger", "seconds": seconds, "budget_s": args.budget_s,
        "stages": [{"label": s["label"], "seconds": s["result"].seconds, "episodes": len(s["result"].episodes),
                    "env_steps": int(sum(e["steps"] for e in s["result"].episodes)),
                    "human_steps": int(sum(e["intervention_steps"] for e in s["result"].episodes))} for s in stages],
        "episodes": len(episodes), "env_steps": int(sum(e["steps"] for e in episodes)),
        "human_steps": int(sum(e["intervention_steps"] for e in episodes)),
        "human_share_last_quarter": last_quarter_share(real_result),
        "human_curve": [{**h, "wall_s": h["wall_s"] + stages[-1]["start_s"]} for h in human_curve(real_result, t_real)],
        "updates": int(real_result.learner[-1]["updates"]) if real_result.learner else 0,
        "final_success": final, "eval_episodes": args.eval_episodes, "eval_seed": args.eval_seed,
        "real_env": args.real_env, "real_options": json.loads(args.real_options), "curve": curve}
    (out / "result.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    plot([summary], out / "curve.png")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("curve", "human_curve")}, indent=1))


def _as(cfg: OnlineConfig, policy: str) -> OnlineConfig:
    """``cfg`` (the real env's) with ``policy`` as the policy that ``success_rate`` loads."""
    import dataclasses

    return dataclasses.replace(cfg, policy=policy)


if __name__ == "__main__":
    main()
