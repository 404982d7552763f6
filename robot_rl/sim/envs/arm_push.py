"""ArmPush: push a 5 cm cube across the table to a goal; the cube cannot be lifted (goal on the table)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.robots import scenes
from robot_rl.sim.envs.arm_base import ArmEnv

SUCCESS_DISTANCE = 0.04
"""The cube's centre counts as at the goal within this horizontal distance [m]."""


class ArmPushEnv(ArmEnv):
    """Reward terms: ``reach`` (-|tcp - cube|/2), ``push`` (-|cube - goal|_xy), ``success`` (+1)."""

    WITH_OBJECT = True

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        xy = self._place_object(qpos, rng)
        angle = rng.uniform(-np.pi, np.pi)
        dist = rng.uniform(0.1, 0.18)
        goal_xy = np.clip(xy + dist * np.array([np.cos(angle), np.sin(angle)]), [0.38, -0.25], [0.68, 0.25])
        self.goal = np.r_[goal_xy, scenes.CUBE_HALF]
        return qpos, np.zeros(self.model.nv)

    def _push_distance(self) -> float:
        return float(np.linalg.norm(self.object_pos()[:2] - self.goal[:2]))

    def _reward_terms(self) -> dict[str, float]:
        reach = float(np.linalg.norm(self.data.site_xpos[self.tcp] - self.object_pos()))
        push = self._push_distance()
        return {"reach": -0.5 * reach, "push": -push, "success": float(push < SUCCESS_DISTANCE)}

    def _is_success(self) -> bool:
        return self._push_distance() < SUCCESS_DISTANCE
