"""Crazyflie hover, side by side in the same sim and seeds: our scripted expert, RAPTOR's pretrained
foundation policy (through :mod:`robot_rl.sim.experts.raptor`) and, when given, a policy we trained.

Metric per episode (5 s from the env's random start, 0.5 m / 0.2 rad / 0.2 m/s spread): the mean distance
to the goal over the last 2 s, and whether it crashed (too low, flipped or flown away: the env terminates).
Each controller runs at its own rate and with its own action space (expert 50 Hz thrust + body rates,
RAPTOR 100 Hz motor commands; a trained policy as its checkpoint says).

    .venv/bin/python benchmarks/quad_hover_compare.py [--episodes 50] [--policy runs/hover/policy]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.sim.experts import HoverExpert
from robot_rl.sim.experts.raptor import POLICY_HZ as RAPTOR_HZ
from robot_rl.sim.experts.raptor import RaptorAgent

SECONDS = 5.0
SCORED_S = 2.0


def fly(env_id: str, agent: Any, hz: float, episodes: int, seed: int, **env_kwargs: Any) -> dict[str, float]:
    """Mean/max final hover error [cm] over surviving episodes, crashes, wall seconds."""
    steps = int(SECONDS * hz)
    env = gym.make(env_id, policy_hz=hz, max_episode_steps=steps, **env_kwargs)
    errors, crashes, t0 = [], 0, time.perf_counter()
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        agent.reset()
        tail = []
        for t in range(steps):
            obs, _, terminated, truncated, _ = env.step(agent.act(obs))
            if t >= steps - int(SCORED_S * hz):
                tail.append(float(np.linalg.norm(obs["position"] - obs["goal_pos"])))
            if terminated:
                crashes += 1
                break
            if truncated:
                break
        if not terminated:
            errors.append(np.mean(tail))
    e = np.array(errors) * 100 if errors else np.array([np.nan])
    return {"mean_cm": float(e.mean()), "p90_cm": float(np.percentile(e, 90)), "within_5cm": int((e < 5).sum()),
            "crashes": crashes, "seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=10_000, help="first reset seed (unseen by training)")
    parser.add_argument("--policy", default="", help="a trained robot_rl policy checkpoint folder to add")
    args = parser.parse_args()

    rows: list[tuple[str, Callable[[], Any], float, dict[str, Any]]] = [
        ("scripted expert (50 Hz, thrust + body rates)", HoverExpert, 50.0, {}),
        ("RAPTOR foundation policy (100 Hz, motors)", RaptorAgent, RAPTOR_HZ, {"control_mode": "motor_commands"}),
    ]
    if args.policy:
        from robot_rl.policies.base import Policy
        from robot_rl.runtime.policy_runner import PolicyRunner

        policy = Policy.load(args.policy)
        mode = policy.spec.control_mode.value if getattr(policy.spec, "control_mode", None) else "thrust_body_rates"
        rows.append((f"trained {args.policy} ({mode})", lambda: PolicyRunner(policy), 50.0, {"control_mode": mode}))
    print(f"{args.episodes} episodes per row, seeds {args.seed}..{args.seed + args.episodes - 1}, "
          f"error = mean |p - goal| over the last {SCORED_S:.0f} s of {SECONDS:.0f} s")
    print(f"{'env':34s} {'controller':52s} {'mean cm':>8s} {'p90 cm':>7s} {'<5 cm':>6s} {'crashes':>8s}")
    for env_id in ("robot_rl/QuadHover-v0", "robot_rl/QuadHover-RealStandIn-v0"):
        for name, make, hz, kwargs in rows:
            r = fly(env_id, make(), hz, args.episodes, args.seed, **kwargs)
            print(f"{env_id:34s} {name:52s} {r['mean_cm']:8.1f} {r['p90_cm']:7.1f} "
                  f"{r['within_5cm']:>3d}/{args.episodes - r['crashes']:<3d} {r['crashes']:>4d}/{args.episodes}",
                  flush=True)


if __name__ == "__main__":
    main()
