"""QuadHover: fly from a perturbed start to a fixed point 1 m above the floor and stay there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.robots import cf2x
from robot_rl.sim.envs.quad_base import QuadEnv

SUCCESS_DISTANCE = 0.05
SUCCESS_SPEED = 0.1
"""Success: within 5 cm of the goal and slower than 0.1 m/s."""


class QuadHoverEnv(QuadEnv):
    """Start up to 0.5 m off the goal with a random attitude (+-0.2 rad) and velocity."""

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        self.goal = np.array([0.0, 0.0, 1.0])
        self.goal_vel = np.zeros(3)
        return self._initial_state(rng, 0.5)

    def _is_success(self) -> bool:
        speed = float(np.linalg.norm(self.data.qvel[cf2x.QVEL_BASE_LINVEL]))
        return self.error() < SUCCESS_DISTANCE and speed < SUCCESS_SPEED
