"""Residual RL trained in-process for the tests: the learner's algorithm object and the runtime's episode loop.

No processes and no sockets: each episode's transitions go straight to the algorithm, every version is
published to ``<root>/weights`` as the learner would, and the actor swaps it in between steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from robot_rl.learners.algorithms.residual import (
    MARKER,
    ResidualActorWeights,
    ResidualAgent,
    ResidualAlgorithm,
    ResidualConfig,
)
from robot_rl.runtime.episode import run_episode
from robot_rl.runtime.weights import WeightsPublisher, list_versions
from robot_rl.sim.experts import expert_for


def train_residual(cfg: ResidualConfig, env: gym.Env[Any, Any], root: Path, episodes: int,
                   first_seed: int = 100) -> tuple[ResidualAlgorithm, ResidualActorWeights, float]:
    """(algorithm, newest published residual, seconds) after ``episodes`` episodes on the env's expert."""
    algo = ResidualAlgorithm(cfg, root / "checkpoint", 100_000, 1.0, 10**9, device="cpu")
    publisher = WeightsPublisher(root / "weights", marker=MARKER)
    agent = ResidualAgent(expert_for(env), weights_dir=root / "weights")
    start = time.monotonic()
    for episode in range(episodes):
        algo.add(run_episode(env, agent, episode, seed=first_seed + episode, base_agent=agent.base_view,
                             keep=True).transitions)
        if n := algo.train_allowed():
            algo.update(n)
            publisher.publish(algo.publish)
    assert algo.failure is None, algo.failure
    trained = ResidualActorWeights.load(list_versions(root / "weights", MARKER)[-1][1])
    return algo, trained, time.monotonic() - start
