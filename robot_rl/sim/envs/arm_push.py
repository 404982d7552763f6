"""ArmPush: push a 5 cm cube across the table to a goal; the cube cannot be lifted (goal on the table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.robots import scenes
from robot_rl.sim.envs.arm_base import ArmEnv

SUCCESS_DISTANCE = 0.04
"""The cube's centre counts as at the goal within this horizontal distance [m]."""
GOAL_DISTANCE_RANGE = (0.1, 0.18)
"""How far from the cube the goal is drawn [m] (before it is clipped onto the table area)."""
GOAL_XY_LOW, GOAL_XY_HIGH = (0.38, -0.25), (0.68, 0.25)
"""Table area the goal is clipped into (x, y) [m]: where the pushing hand still reaches."""


def sample_push_goal(cube_xy: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A goal (x, y) on the table a push away from ``cube_xy``, in a random direction."""
    angle = rng.uniform(-np.pi, np.pi)
    dist = rng.uniform(*GOAL_DISTANCE_RANGE)
    return np.clip(cube_xy + dist * np.array([np.cos(angle), np.sin(angle)]), GOAL_XY_LOW, GOAL_XY_HIGH)


def push_distance(cube_pos: np.ndarray, goal: np.ndarray) -> float:
    """Horizontal cube-goal distance [m]: push success ignores heights (the goal may float above the table)."""
    return float(np.linalg.norm(cube_pos[:2] - goal[:2]))


def push_terms(tcp: np.ndarray, cube_pos: np.ndarray, goal: np.ndarray) -> dict[str, float]:
    """Reward terms ``reach`` (-|tcp - cube|/2), ``push`` (-|cube - goal|_xy) and ``success`` (+1)."""
    reach = float(np.linalg.norm(tcp - cube_pos))
    push = push_distance(cube_pos, goal)
    return {"reach": -0.5 * reach, "push": -push, "success": float(push < SUCCESS_DISTANCE)}


def push_success(cube_pos: np.ndarray, goal: np.ndarray) -> bool:
    """The cube's centre is within :data:`SUCCESS_DISTANCE` of the goal, horizontally."""
    return push_distance(cube_pos, goal) < SUCCESS_DISTANCE


class ArmPushEnv(ArmEnv):
    """Reward terms: ``reach`` (-|tcp - cube|/2), ``push`` (-|cube - goal|_xy), ``success`` (+1)."""

    WITH_OBJECT = True

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        xy = self._place_object(qpos, rng)
        self.goal = np.r_[sample_push_goal(xy, rng), scenes.CUBE_HALF]
        return qpos, np.zeros(self.model.nv)

    def _reward_terms(self) -> dict[str, float]:
        return push_terms(self.data.site_xpos[self.tcp], self.object_pos(), self.goal)

    def _is_success(self) -> bool:
        return push_success(self.object_pos(), self.goal)
