"""HumanoidStand: keep the G1 standing while random horizontal pushes hit its torso."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.robots import g1
from robot_rl.sim.envs.humanoid_base import HumanoidEnv

PUSH_FORCE_N = (20.0, 60.0)
"""Push magnitude range [N] (``reset(options={"push_force": (lo, hi)})`` overrides; (0, 0) disables)."""
PUSH_DURATION_S = 0.1
PUSH_INTERVAL_S = (1.0, 2.0)
"""Time between pushes [s]."""


class HumanoidStandEnv(HumanoidEnv):
    """Reward terms: alive, upright, height, posture, torque. Success: still standing."""


    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = options.get("push_force", PUSH_FORCE_N)
        self.push_range = (float(lo), float(hi))
        self.push_rng = np.random.default_rng(rng.integers(2**63))
        self.next_push = float(self.push_rng.uniform(*PUSH_INTERVAL_S))
        self.push_end = -1.0
        self.push_force = np.zeros(3)
        self.pushes = 0
        return self._initial_qpos(rng)

    def _before_physics(self) -> None:
        t = float(self.data.time)
        torso = g1.TORSO_BODY
        if t >= self.next_push and self.push_range[1] > 0:
            angle = self.push_rng.uniform(-np.pi, np.pi)
            magnitude = self.push_rng.uniform(*self.push_range)
            self.push_force = magnitude * np.array([np.cos(angle), np.sin(angle), 0.0])
            self.backend.apply_body_force(torso, self.push_force)
            self.push_end = t + PUSH_DURATION_S
            self.next_push = t + float(self.push_rng.uniform(*PUSH_INTERVAL_S))
            self.pushes += 1
        elif 0 <= self.push_end <= t:
            self.backend.clear_body_forces()
            self.push_end = -1.0

    def _reward_terms(self) -> dict[str, float]:
        return self._posture_terms()

    def _is_success(self) -> bool:
        return not self.fallen()
