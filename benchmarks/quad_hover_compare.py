"""Crazyflie hover or tracking, side by side in the same sim and seeds: our scripted expert, RAPTOR's
pretrained foundation policy (through :mod:`robot_rl.sim.experts.raptor`) and, when given, a policy we trained.

Metric per episode: the mean distance to the goal over the scored window, and whether it crashed (too low,
flipped or flown away: the env terminates). Hover: 5 s from the env's random start (0.5 m / 0.2 rad /
0.2 m/s spread), scored over the last 2 s. Track (``--task track``, the figure-eight of QuadTrack-v0):
8 s, scored from 2 s on. Each controller runs at its own rate and with its own action space (expert 50 Hz
thrust + body rates, RAPTOR 100 Hz motor commands; a trained policy as its checkpoint says).

    .venv/bin/python benchmarks/quad_hover_compare.py [--task hover|track] [--episodes 50] [--policy DIR ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.policies.base import Policy
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.sim.experts import HoverExpert
from robot_rl.sim.experts.raptor import POLICY_HZ as RAPTOR_HZ
from robot_rl.sim.experts.raptor import RaptorAgent

TASKS = {"hover": ("QuadHover", 5.0, 3.0), "track": ("QuadTrack", 8.0, 2.0)}
"""--task -> (env name, episode length [s], scored from [s])."""


def fly(env_id: str, agent: Any, hz: float, episodes: int, seed: int, seconds: float = 5.0,
        scored_from_s: float = 3.0, **env_kwargs: Any) -> dict[str, float]:
    """Mean/max error [cm] over surviving episodes (scored from ``scored_from_s``), crashes, wall seconds."""
    steps = int(seconds * hz)
    env = gym.make(env_id, policy_hz=hz, max_episode_steps=steps, **env_kwargs)
    errors, crashes, t0 = [], 0, time.perf_counter()
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        agent.reset()
        tail = []
        for t in range(steps):
            obs, _, terminated, truncated, _ = env.step(agent.act(obs))
            if t >= int(scored_from_s * hz):
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
    parser.add_argument("--task", choices=sorted(TASKS), default="hover")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=10_000, help="first reset seed (unseen by training)")
    parser.add_argument("--policy", action="append", default=[],
                        help="a trained robot_rl policy checkpoint folder to add (repeatable)")
    args = parser.parse_args()
    task, seconds, scored_from = TASKS[args.task]

    rows: list[tuple[str, Callable[[], Any], float, dict[str, Any]]] = [
        ("scripted expert (50 Hz, thrust + body rates)", HoverExpert, 50.0, {}),
        ("RAPTOR foundation policy (100 Hz, motors)", RaptorAgent, RAPTOR_HZ, {"control_mode": "motor_commands"}),
    ]
    for path in args.policy:
        policy = Policy.load(path)
        mode = str(getattr(policy.spec, "control_mode", "") or "thrust_body_rates")
        rows.append((f"trained {path} ({mode})", lambda p=policy: PolicyRunner(p), 50.0, {"control_mode": mode}))
    print(f"{args.episodes} episodes per row, seeds {args.seed}..{args.seed + args.episodes - 1}, "
          f"error = mean |p - goal| from {scored_from:.0f} s to {seconds:.0f} s")
    print(f"{'env':34s} {'controller':52s} {'mean cm':>8s} {'p90 cm':>7s} {'<5 cm':>6s} {'crashes':>8s}")
    for env_id in (f"robot_rl/{task}-v0", f"robot_rl/{task}-RealStandIn-v0"):
        for name, make, hz, kwargs in rows:
            r = fly(env_id, make(), hz, args.episodes, args.seed, seconds, scored_from, **kwargs)
            print(f"{env_id:34s} {name:52s} {r['mean_cm']:8.1f} {r['p90_cm']:7.1f} "
                  f"{r['within_5cm']:>3d}/{args.episodes - r['crashes']:<3d} {r['crashes']:>4d}/{args.episodes}",
                  flush=True)


if __name__ == "__main__":
    main()
