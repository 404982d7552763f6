"""ArmReach: bring the Panda's tool centre point to a random goal point in the workspace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.sim.envs.arm_base import ArmEnv

SUCCESS_DISTANCE = 0.03
"""The tcp counts as at the goal within this distance [m]."""


def reach_distance(tcp: np.ndarray, goal: np.ndarray) -> float:
    """|tcp - goal| [m]: what reach's reward and success are made of (shared with the multi-task env)."""
    return float(np.linalg.norm(tcp - goal))


def reach_terms(tcp: np.ndarray, goal: np.ndarray) -> dict[str, float]:
    """Reward terms ``distance`` (-|tcp - goal|) and ``success`` (+1 within :data:`SUCCESS_DISTANCE`)."""
    dist = reach_distance(tcp, goal)
    return {"distance": -dist, "success": float(dist < SUCCESS_DISTANCE)}


def reach_success(tcp: np.ndarray, goal: np.ndarray) -> bool:
    """The tcp is within :data:`SUCCESS_DISTANCE` of the goal."""
    return reach_distance(tcp, goal) < SUCCESS_DISTANCE


class ArmReachEnv(ArmEnv):
    """Reward terms: ``distance`` (-|tcp - goal|) and ``success`` (+1 within 3 cm)."""

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        self.goal = np.array([rng.uniform(0.35, 0.65), rng.uniform(-0.3, 0.3), rng.uniform(0.1, 0.5)])
        return qpos, np.zeros(self.model.nv)

    def _reward_terms(self) -> dict[str, float]:
        return reach_terms(self.data.site_xpos[self.tcp], self.goal)

    def _is_success(self) -> bool:
        return reach_success(self.data.site_xpos[self.tcp], self.goal)
