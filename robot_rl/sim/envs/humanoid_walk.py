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

from robot_rl.control.rotations import heading_planar
from robot_rl.core import FieldSpec, SpecError
from robot_rl.robots import g1
from robot_rl.sim.base_env import ConfigSource
from robot_rl.sim.envs.humanoid_base import HumanoidEnv
from robot_rl.sim.envs.humanoid_gait import GaitReward, gait_clock

COMMAND_LOW = np.array([-0.3, -0.3, -0.6])
COMMAND_HIGH = np.array([0.8, 0.3, 0.6])
"""Command ranges: vx, vy [m/s] and yaw rate [rad/s]."""
TRACKING_SIGMA = 0.25
SUCCESS_TOLERANCE = 0.15
SMOOTHING_S = 1.0
REWARDS = ("tracking", "gait")
"""``tracking``: velocity kernels and posture regularisers (the residual and scripted learners' reward);
``gait``: unitree_rl_gym's G1 recipe around a gait clock (robot_rl.sim.envs.humanoid_gait), for RL from scratch."""


class HumanoidWalkEnv(HumanoidEnv):
    """The G1 tracking a commanded planar velocity; rewards by ``reward`` (REWARDS), pushes by ``push_speed``.

    Reward terms (``reward: tracking``): lin_vel_tracking, ang_vel_tracking, alive, upright, height, posture,
    torque, action_rate; ``reward: gait``: robot_rl.sim.envs.humanoid_gait.WEIGHTS.

    ``reward_weights`` overrides weights of the gait terms. ``push_speed`` > 0: every ``push_interval_s``
    (uniform in the range) the pelvis gets a random horizontal velocity kick of up to that many m/s per axis
    (legged_gym's ``push_robots``).
    """

    def __init__(self, config: ConfigSource = None, render_mode: str | None = None,
                 command: npt.ArrayLike | None = None, reward: str = "tracking", push_speed: float = 0.0,
                 push_interval_s: tuple[float, float] = (2.0, 4.0), reward_weights: Mapping[str, float] | None = None,
                 **overrides: Any) -> None:
        self.fixed_command = None if command is None else self._checked_command(command, "command")
        if reward not in REWARDS:
            raise SpecError(f"reward: expected one of {REWARDS}, got {reward!r}")
        if reward_weights and reward != "gait":
            raise SpecError(f"reward_weights: weigh the gait terms (reward: gait), not reward: {reward}")
        lo, hi = (float(v) for v in push_interval_s)
        if not (np.isfinite(push_speed) and push_speed >= 0 and 0 < lo <= hi):
            raise SpecError(f"push_speed >= 0 and 0 < push_interval_s[0] <= [1], got {push_speed}, {push_interval_s}")
        self.push_speed, self.push_interval_s = float(push_speed), (lo, hi)
        super().__init__(config, render_mode, **overrides)
        self.gait = (GaitReward(self.model, self.q_idx, self.dq_idx, self.default_q, 1.0 / self.config.policy_hz,
                                reward_weights) if reward == "gait" else None)

    @staticmethod
    def _checked_command(command: npt.ArrayLike, name: str) -> np.ndarray:
        """A finite (vx, vy, yaw rate) clipped into the command ranges; SpecError otherwise."""
        c = np.asarray(command, dtype=np.float64)
        if c.shape != (3,) or not np.all(np.isfinite(c)):
            raise SpecError(f"{name}: expected 3 finite values (vx, vy, yaw rate), got {c}")
        return np.clip(c, COMMAND_LOW, COMMAND_HIGH)

    def _task_fields(self) -> dict[str, FieldSpec]:
        return {"command": FieldSpec((3,), low=tuple(COMMAND_LOW), high=tuple(COMMAND_HIGH),
                                     description="vx, vy [m/s] in the pelvis heading frame, yaw rate [rad/s]"),
                # unbounded: sensor noise (a stand-in's) may push them past +-1
                "gait_clock": FieldSpec((2,), description="sin, cos of the left leg's gait phase (time since start)"),
                "last_action": FieldSpec((29,), description="the previous action as applied, in [-1, 1]")}

    def _task_observation(self) -> dict[str, np.ndarray]:
        return {"command": self.command, "gait_clock": gait_clock(self._steps / self.config.policy_hz),
                "last_action": self.prev_action}

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
        if self.push_speed > 0:  # drawn only then: the other episodes keep their seeds' streams
            self.push_rng = np.random.default_rng(rng.integers(2**63))
            self.next_push = self.push_rng.uniform(*self.push_interval_s)
        return self._initial_qpos(rng)

    def _reset_controller(self) -> None:
        super()._reset_controller()
        if self.gait is not None:
            self.gait.reset(self.data)

    def _apply_action(self, action: dict[str, np.ndarray]) -> None:
        a = action["joint_targets"].astype(np.float64)
        self.action_rate = float(np.sum((a - self.prev_action) ** 2))
        self.prev_action = a  # as applied: step_stages clipped it into the action space
        if self.push_speed > 0 and self.data.time >= self.next_push:
            self.data.qvel[g1.QVEL_BASE_LINVEL][:2] += self.push_rng.uniform(-self.push_speed, self.push_speed, 2)
            self.next_push = self.data.time + self.push_rng.uniform(*self.push_interval_s)
        super()._apply_action(action)

    def _heading_velocity(self, rot: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """Planar velocity in the pelvis heading frame and the yaw rate (world z); ``rot``: the base rotation."""
        rot = self.base_rotation() if rot is None else rot
        wz = float((rot @ self.data.qvel[g1.QVEL_BASE_ANGVEL])[2])
        return heading_planar(rot, self.data.qvel[g1.QVEL_BASE_LINVEL]), wz

    def _reward_terms(self) -> dict[str, float]:
        rot = self.base_rotation()
        v, wz = self._heading_velocity(rot)
        alpha = 1.0 / (self.config.policy_hz * SMOOTHING_S)
        self.smoothed_vel += alpha * (v - self.smoothed_vel)
        if self.gait is not None:
            d, base = self.data, self._base
            err = self.command[:2] - v
            return self.gait.terms(d, self._steps / self.config.policy_hz, float(err @ err),
                                   float((self.command[2] - wz) ** 2), rot.T @ d.qvel[base.qvel_linvel],
                                   d.qvel[base.qvel_angvel], rot[2], self.base_height(), self.action_rate)
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
