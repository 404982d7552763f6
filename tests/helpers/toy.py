"""A tiny point-reaching task with a scripted expert, for policy and learner tests that must not need MuJoCo.

A point in the plane moves by ``0.1 * action`` per step toward a goal; the expert's action is
``clip(2 * (goal - pos), -1, 1)``, so actions change smoothly over a chunk and depend on the state, which
is what an overfitting test needs to tell a working policy from one that outputs an average.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from robot_rl.training.dataset import ChunkDataset

STEP = 0.1
"""Displacement per unit action per step."""


def expert_action(pos: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """The scripted expert."""
    return np.clip(2.0 * (goal - pos), -1.0, 1.0).astype(np.float32)


def toy_episode(rng: np.random.Generator, length: int = 30, goal_x: tuple[float, float] = (-1.0, 1.0),
                expert: Callable[[np.ndarray, np.ndarray], np.ndarray] = expert_action) -> dict[str, np.ndarray]:
    """One episode of ``expert`` from a random start to a random goal (its x drawn from ``goal_x``).

    Returns {"pos": (T, 2), "goal": (T, 2), "action": (T, 2)}.
    """
    pos = rng.uniform(-1, 1, 2)
    goal = np.array([rng.uniform(*goal_x), rng.uniform(-1, 1)])
    rows: dict[str, list[np.ndarray]] = {"pos": [], "goal": [], "action": []}
    for _ in range(length):
        a = expert(pos, goal)
        rows["pos"].append(pos.astype(np.float32))
        rows["goal"].append(goal.astype(np.float32))
        rows["action"].append(a)
        pos = pos + STEP * a
    return {k: np.stack(v) for k, v in rows.items()}


def toy_episodes(n: int, length: int = 30, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` expert episodes of :func:`toy_episode`."""
    rng = np.random.default_rng(seed)
    return [toy_episode(rng, length) for _ in range(n)]


def toy_dataset(n: int, n_obs_steps: int, horizon: int, length: int = 30, seed: int = 0) -> ChunkDataset:
    """The episodes of :func:`toy_episodes` as a training dataset (state keys "pos" and "goal")."""
    eps = toy_episodes(n, length, seed)
    cat = {k: np.concatenate([e[k] for e in eps]) for k in ("pos", "goal", "action")}
    ends = np.cumsum([len(e["action"]) for e in eps])
    return ChunkDataset({"pos": cat["pos"], "goal": cat["goal"]}, cat["action"], ends, ["reach the goal"] * n,
                        [], n_obs_steps, horizon)
