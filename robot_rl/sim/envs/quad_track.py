"""QuadTrack: follow a moving goal along a tilted figure-eight (random size, speed and phase)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.sim.envs.quad_base import QuadEnv

SUCCESS_DISTANCE = 0.1
"""Success (per step): within 10 cm of the moving goal."""


class QuadTrackEnv(QuadEnv):
    """Goal: ``centre + (a sin wt, b sin 2wt, c sin wt)``; velocity feed-forward is observed."""


    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        self.centre = np.array([0.0, 0.0, 1.0])
        self.amplitude = np.array([rng.uniform(0.4, 0.8), rng.uniform(0.2, 0.4), rng.uniform(0.0, 0.2)])
        self.omega = float(rng.uniform(0.6, 1.2))
        self.phase = float(rng.uniform(0, 2 * np.pi))
        self.goal, self.goal_vel = self._goal_at(0.0)
        return self._initial_state(rng, 0.1)

    def _goal_at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        w, a, p = self.omega, self.amplitude, self.phase
        s = np.array([np.sin(w * t + p), np.sin(2 * (w * t + p)), np.sin(w * t + p)])
        ds = np.array([w * np.cos(w * t + p), 2 * w * np.cos(2 * (w * t + p)), w * np.cos(w * t + p)])
        return self.centre + a * s, a * ds

    def _is_success(self) -> bool:
        return self.error() < SUCCESS_DISTANCE
