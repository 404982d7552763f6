"""HumanoidWalk: track a commanded planar velocity (vx, vy, yaw rate) with the G1.

The command is sampled at reset and observed. ``reset(options={"command": (vx, vy, wz)})`` fixes it for
one episode; ``gym.make(..., command=(vx, vy, wz))`` for every episode without an option (what an online
run's ``actor.env_options`` can set, since the actors reset without options).
Reward terms follow the usual velocity-tracking recipe (legged_gym / MuJoCo Playground): Gaussian
kernels of the velocity errors plus posture regularisers and an action-rate penalty. Success: after
2 s, the smoothed body-frame velocity (1 s time constant) is within 0.15 m/s of the command.
Its reference controller is :class:`robot_rl.sim.experts.WalkingController` (DCM walking through
the legs' inverse kinematics); benchmarks/README.md "Simulation" has its measured tracking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from robot_rl.control.rotations import mat_yaw
from robot_rl.core import FieldSpec, SpecError
from robot_rl.robots import g1
from robot_rl.sim.base_env import ConfigSource
from robot_rl.sim.envs.humanoid_base import HumanoidEnv

COMMAND_LOW = np.array([-0.3, -0.3, -0.6])
COMMAND_HIGH = np.array([0.8, 0.3, 0.6])
"""Command ranges: vx, vy [m/s] and yaw rate [rad/s]."""
TRACKING_SIGMA = 0.25
SUCCESS_TOLERANCE = 0.15
SMOOTHING_S = 1.0


class HumanoidWalkEnv(HumanoidEnv):
    """Reward terms: lin_vel_tracking, ang_vel_tracking, alive, upright, height, posture, torque, action_rate."""


    def __init__(self, config: ConfigSource = None, render_mode: str | None = None,
                 command: npt.ArrayLike | None = None, **overrides: Any) -> None:
        self.fixed_command = None if command is None else self._checked_command(command, "command")
        super().__init__(config, render_mode, **overrides)

    @staticmethod
    def _checked_command(command: npt.ArrayLike, name: str) -> np.ndarray:
        """A finite (vx, vy, yaw rate) clipped into the command ranges; SpecError otherwise."""
        c = np.asarray(command, dtype=np.float64)
        if c.shape != (3,) or not np.all(np.isfinite(c)):
            raise SpecError(f"{name}: expected 3 finite values (vx, vy, yaw rate), got {c}")
        return np.clip(c, COMMAND_LOW, COMMAND_HIGH)

    def _task_fields(self) -> dict[str, FieldSpec]:
        return {"command": FieldSpec((3,), low=tuple(COMMAND_LOW), high=tuple(COMMAND_HIGH),
                                     description="vx, vy [m/s] in the pelvis heading frame, yaw rate [rad/s]")}

    def _task_observation(self) -> dict[str, np.ndarray]:
        return {"command": self.command}

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        if "command" in options:
            self.command = self._checked_command(options["command"], "options.command")
        elif self.fixed_command is not None:
            self.command = self.fixed_command.copy()
        else:
            self.command = rng.uniform(COMMAND_LOW, COMMAND_HIGH)
        self.smoothed_vel = np.zeros(2)
        self.prev_action = np.zeros(29)
        self.action_rate = 0.0
        return self._initial_qpos(rng)

    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        a = action["joint_targets"].astype(np.float64)
        self.action_rate = float(np.sum((a - self.prev_action) ** 2))
        self.prev_action = a
        super()._apply_action(action)

    def _heading_velocity(self) -> tuple[np.ndarray, float]:
        """Planar velocity in the pelvis heading frame and the yaw rate (world z)."""
        rot = self.base_rotation()
        heading = mat_yaw(rot)
        c, s = np.cos(heading), np.sin(heading)
        v = self.data.qvel[g1.QVEL_BASE_LINVEL]
        wz = float((rot @ self.data.qvel[g1.QVEL_BASE_ANGVEL])[2])
        return np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1]]), wz

    def _reward_terms(self) -> dict[str, float]:
        v, wz = self._heading_velocity()
        alpha = 1.0 / (self.config.policy_hz * SMOOTHING_S)
        self.smoothed_vel += alpha * (v - self.smoothed_vel)
        terms = self._posture_terms()
        terms["posture"] *= 0.2  # walking needs to leave the default posture
        terms["lin_vel_tracking"] = float(np.exp(-np.sum((self.command[:2] - v) ** 2) / TRACKING_SIGMA))
        terms["ang_vel_tracking"] = 0.5 * float(np.exp(-((self.command[2] - wz) ** 2) / TRACKING_SIGMA))
        terms["action_rate"] = -0.01 * self.action_rate
        return terms

    def _is_success(self) -> bool:
        if self.fallen() or self.data.time < 2.0:
            return False
        return bool(np.linalg.norm(self.smoothed_vel - self.command[:2]) < SUCCESS_TOLERANCE)
