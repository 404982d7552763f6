"""A G1 walking policy on the "real" robots: falls and velocity tracking on unseen seeds, one table.

    .venv/bin/python benchmarks/g1_walk.py --policy runs/walk/policy [--episodes 50] [--seed 300000]
        [--expert] [--out benchmarks/g1_walk.json]

Conditions (each ``--episodes`` seeds from ``--seed``; every episode samples its command over the env's
full range, vx -0.3..0.8, vy +-0.3, yaw rate +-0.6, and lasts 10 s):

* ``nominal``: ``HumanoidWalk-v0`` as it ships (500 Hz physics, whatever rate the policy trained at);
* ``stand-in``: ``HumanoidWalk-RealStandIn-v0`` (the G1's hidden perturbation set);
* ``pushes``: nominal with a random horizontal kick of up to ``PUSH_SPEED`` m/s per axis every 2-4 s;
* ``second G1``: a "real" robot this benchmark defines for itself, outside the stand-in's point (lighter,
  more friction, a stronger and slower actuator, more latency), so no one stand-in is tuned to.

Per episode: fell (the env's termination) and the tracking error (robot_rl.training.task_metrics.walk_error:
|mean planar velocity from 2 s on - command|); it "tracks" when it did not fall and the error <= 0.1 m/s.
The goal (issue: a G1 that walks): <= 1 fall and >= 45/50 tracking in every condition. Wilson 95 % intervals.
``--expert`` adds the DCM walking controller (robot_rl.sim.experts.WalkingController) as a baseline row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import gymnasium as gym

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.policies.base import Policy
from robot_rl.sim.experts import expert_for
from robot_rl.training.evaluate import evaluate, wilson_interval
from robot_rl.training.task_metrics import TASK_METRICS

PUSH_SPEED = 0.4
"""Largest kick per horizontal axis [m/s] of the ``pushes`` condition (training used 0.3)."""
SECOND_G1 = {"mass_scale": (0.95, 0.95), "friction_scale": (1.15, 1.15), "damping_scale": (1.2, 1.2),
             "actuator_gain_scale": (1.04, 1.04), "action_latency_s": (0.016, 0.016),
             "motor_time_constant_s": (0.008, 0.008), "action_noise_std": 0.003, "observation_noise_std": 0.004}
"""The benchmark's own "real" G1 (robot_rl.sim.config.Randomization fields, collapsed ranges)."""
CONDITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "nominal": ("robot_rl/HumanoidWalk-v0", {}),
    "stand-in": ("robot_rl/HumanoidWalk-RealStandIn-v0", {}),
    "pushes": ("robot_rl/HumanoidWalk-v0", {"push_speed": PUSH_SPEED, "push_interval_s": (2.0, 4.0)}),
    "second G1": ("robot_rl/HumanoidWalk-v0", {"randomization": SECOND_G1}),
}
TOLERANCE = 0.1


def run_condition(agent: Any, name: str, episodes: int, seed: int) -> dict[str, Any]:
    """Evaluate ``agent`` (a Policy or an expert) on one condition; falls, tracking and their intervals."""
    env_id, options = CONDITIONS[name]
    env = gym.make(env_id, **options)
    metric = TASK_METRICS["HumanoidWalk"]
    try:
        report = evaluate(agent, env, env_id, episodes, seed, metric=metric.fn, progress=True)
    finally:
        env.close()
    falls = sum(report.failures)
    tracked = sum(not f and m <= TOLERANCE for f, m in zip(report.failures, report.metrics))
    kept = [m for f, m in zip(report.failures, report.metrics) if not f]
    return {"condition": name, "env_id": env_id, "options": {k: str(v) for k, v in options.items()},
            "episodes": episodes, "falls": falls, "falls_ci": wilson_interval(falls, episodes),
            "tracked": tracked, "tracked_ci": wilson_interval(tracked, episodes),
            "mean_error": float(sum(kept) / len(kept)) if kept else float("nan"),
            "goal_met": falls <= 1 and tracked >= 0.9 * episodes}


def main() -> None:
    """Evaluate the policy (and the expert) on every condition; print a table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="an mlp walking policy (robot-rl rl train's <out>/policy)")
    parser.add_argument("--expert", action="store_true", help="also the DCM walking controller")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=300_000, help="first evaluation seed (unseen in training)")
    parser.add_argument("--conditions", nargs="*", default=list(CONDITIONS), choices=list(CONDITIONS))
    parser.add_argument("--out", default="benchmarks/g1_walk.json")
    args = parser.parse_args()
    agents: dict[str, Any] = {}
    if args.policy:
        agents["policy"] = Policy.load(args.policy)
    if args.expert:
        agents["DCM walker"] = expert_for(gym.make("robot_rl/HumanoidWalk-v0"))
    if not agents:
        parser.error("name --policy and/or --expert")
    rows = []
    for label, agent in agents.items():
        for name in args.conditions:
            row = {"agent": label, "policy": args.policy if label == "policy" else "",
                   **run_condition(agent, name, args.episodes, args.seed)}
            rows.append(row)
            print(f"{label:>11} | {name:>9} | falls {row['falls']:2d}/{args.episodes} | tracked {row['tracked']:2d}/"
                  f"{args.episodes} (CI {row['tracked_ci'][0]:.2f}-{row['tracked_ci'][1]:.2f}) | mean error "
                  f"{row['mean_error']:.3f} m/s | goal {'met' if row['goal_met'] else 'not met'}", flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
