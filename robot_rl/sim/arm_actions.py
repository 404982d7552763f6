"""Cartesian delta actions -> absolute tool targets, by the rule of the simulated arm envs.

A policy trained on ``robot_rl/Arm*-v0`` emits ``delta_pose`` in [-1, 1]^6. The env turns it into a
target: position = measured tcp + delta * MAX_LIN_SPEED / policy_hz (clipped to the workspace box),
orientation = roll-pitch-yaw increment * MAX_ANG_SPEED / policy_hz applied to the previous target. The
ROS policy node needs the very same rule to drive the same policy through ``target_pose``, so both
use :class:`CartesianDeltaIntegrator`.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.control.rotations import mat_to_quat, quat_to_mat

MAX_LIN_SPEED = 0.4
"""Largest commanded tcp speed [m/s] at action magnitude 1."""
MAX_ANG_SPEED = 1.5
"""Largest commanded tcp angular speed [rad/s] at action magnitude 1."""
WORKSPACE_LOW = np.array([0.25, -0.4, 0.005])
WORKSPACE_HIGH = np.array([0.8, 0.4, 0.6])
"""Box the tcp target is clipped into [m] (robot base frame = world)."""


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """World-frame rotation for small roll-pitch-yaw increments."""
    quat = np.zeros(4)
    mujoco.mju_euler2Quat(quat, np.array([roll, pitch, yaw]), "XYZ")
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


class CartesianDeltaIntegrator:
    """Keeps the orientation target and turns each delta action into an absolute (position, quat wxyz)."""

    def __init__(self, policy_hz: float) -> None:
        if policy_hz <= 0:
            raise ValueError(f"policy_hz must be positive, got {policy_hz}")
        self.step_lin = MAX_LIN_SPEED / policy_hz
        self.step_ang = MAX_ANG_SPEED / policy_hz
        self.tcp: np.ndarray | None = None
        self.target_rot: np.ndarray | None = None

    def observe(self, position: np.ndarray, quat: np.ndarray) -> None:
        """The measured tool pose; the first one also initialises the orientation target."""
        self.tcp = np.asarray(position, dtype=np.float64).copy()
        if self.target_rot is None:
            self.target_rot = quat_to_mat(quat)

    def reset(self) -> None:
        """Forget the orientation target (new episode)."""
        self.target_rot = None

    def step(self, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Target (position, quat wxyz) for one delta action.

        Raises:
            RuntimeError: before the first :meth:`observe`.
        """
        if self.tcp is None or self.target_rot is None:
            raise RuntimeError("CartesianDeltaIntegrator.step before any observed tool pose")
        d = np.clip(np.asarray(delta, dtype=np.float64), -1.0, 1.0)
        position = np.clip(self.tcp + d[:3] * self.step_lin, WORKSPACE_LOW, WORKSPACE_HIGH)
        self.target_rot = rpy_matrix(*(d[3:] * self.step_ang)) @ self.target_rot
        return position, mat_to_quat(self.target_rot)
