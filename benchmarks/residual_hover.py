"""Residual RL in the online runner on the quadrotor stand-in: hover error of the expert vs expert + residual.

    .venv/bin/python benchmarks/residual_hover.py [--run outputs/residual_hover] [--set actor.episodes=300]

Runs ``config/learners/online_quad_residual.yaml`` through the process runner (one learner, one actor;
the hover expert is the frozen base), then evaluates the expert alone and the expert plus the newest
published residual (its mean, no exploration) on 20 unseen seeds: the mean |z - goal_z| over the last
100 of 250 steps (2 s), over the episodes that did not crash.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config
from robot_rl.learners.online import run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.residual import MARKER, ResidualActorWeights, ResidualAgent
from robot_rl.learners.transport import list_versions
from robot_rl.runtime.episode import run_episode
from robot_rl.sim.experts import expert_for

ROOT = Path(__file__).resolve().parents[1]


def hover_error(env_id: str, agent: ResidualAgent, seeds: range) -> tuple[float, float, int]:
    """(mean, std of the per-episode error [m], episodes that crashed) over ``seeds``."""
    errors, crashed = [], 0
    for seed in seeds:
        out = run_episode(gym.make(env_id), agent, 0, seed=seed, keep=True)
        if out.length < 250:
            crashed += 1
            continue
        z = np.array([t.next_observation["position"][2] - t.next_observation["goal_pos"][2] for t in out.transitions])
        errors.append(float(np.abs(z[-100:]).mean()))
    return float(np.mean(errors)), float(np.std(errors)), crashed


def main() -> None:
    """Run, evaluate, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="outputs/residual_hover")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(OnlineConfig, ROOT / "config/learners/online_quad_residual.yaml", args.overrides)
    t0 = time.perf_counter()
    result = run_online(cfg, args.run, progress=False, timeout=1800)
    last = result.learner[-1]
    print(f"online run: {len(result.episodes)} episodes, {last['steps']} steps, {last['updates']} updates, "
          f"{last['version']} versions in {time.perf_counter() - t0:.0f} s")
    seeds = range(1000, 1020)
    env = gym.make(cfg.actor.env_id)
    base = hover_error(cfg.actor.env_id, ResidualAgent(expert_for(env)), seeds)
    version, folder = list_versions(Path(args.run) / "weights", MARKER)[-1]
    agent = ResidualAgent(expert_for(env), residual=ResidualActorWeights.load(folder), deterministic=True)
    residual = hover_error(cfg.actor.env_id, agent, seeds)
    for name, (mean, std, crashed) in (("expert", base), (f"expert + residual v{version}", residual)):
        print(f"{name:>24}: |z - goal| {mean * 100:.1f} ± {std * 100:.1f} cm, crashed {crashed}/{len(seeds)}")


if __name__ == "__main__":
    main()
