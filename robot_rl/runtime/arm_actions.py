"""Cartesian delta actions -> absolute tool targets, by the rule of the simulated arm envs.

A policy trained on ``robot_rl/Arm*-v0`` emits ``delta_pose`` in [-1, 1]^6. The env turns it into a
target: position = measured tcp + delta * MAX_LIN_SPEED / policy_hz (clipped to the robot's workspace box,
``safety.workspace_low/high`` of ``controllers/<robot>.yaml``, the box the safety layer and target gate enforce),
orientation = roll-pitch-yaw increment * MAX_ANG_SPEED / policy_hz applied to the previous target. The
ROS policy node needs the very same rule to drive the same policy through ``target_pose``, so both
use :class:`CartesianDeltaIntegrator`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import mujoco
import numpy as np

from robot_rl.control.config import workspace_box
from robot_rl.control.rotations import mat_to_quat, mat_to_rpy, quat_to_mat
from robot_rl.control.watchdog import WorkspaceBox

MAX_LIN_SPEED = 0.4
"""Largest commanded tcp speed [m/s] at action magnitude 1."""
MAX_ANG_SPEED = 1.5
"""Largest commanded tcp angular speed [rad/s] at action magnitude 1."""


def workspace(robot: str = "panda") -> WorkspaceBox:
    """The robot's workspace box from ``controllers/<robot>.yaml`` (:func:`robot_rl.control.config.workspace_box`).

    Raises:
        ConfigError: when the yaml gives no box.
    """
    return workspace_box(robot)


WORKSPACE = workspace("panda")
"""The Panda box the tcp target is clipped into [m] (robot base frame = world); the arm envs use it."""
WORKSPACE_LOW = WORKSPACE.low_array
WORKSPACE_HIGH = WORKSPACE.high_array


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """World-frame rotation for small roll-pitch-yaw increments."""
    quat = np.zeros(4)
    mujoco.mju_euler2Quat(quat, np.array([roll, pitch, yaw]), "XYZ")
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


class CartesianDeltaIntegrator:
    """Keeps the orientation target and turns each delta action into an absolute (position, quat wxyz)."""

    def __init__(self, policy_hz: float, box: WorkspaceBox = WORKSPACE) -> None:
        if policy_hz <= 0:
            raise ValueError(f"policy_hz must be positive, got {policy_hz}")
        self.box = box
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
        position = self.box.clip(self.tcp + d[:3] * self.step_lin)
        self.target_rot = rpy_matrix(*(d[3:] * self.step_ang)) @ self.target_rot
        return position, mat_to_quat(self.target_rot)

    def delta_between(self, pos_a: np.ndarray, quat_a: np.ndarray, pos_b: np.ndarray,
                      quat_b: np.ndarray) -> np.ndarray:
        """The delta action (6,) that :meth:`step` would turn into a move from pose a to pose b, clipped.

        Used to relabel a human's steps from the measured tool motion: the human commanded absolute
        targets, but the learner needs them in the policy's action space. The rotation is the
        roll-pitch-yaw (the convention of :func:`rpy_matrix`, scipy "xyz") of ``R_b R_a^T``.
        """
        return np.clip(self.unclipped_delta(pos_a, quat_a, pos_b, quat_b), -1.0, 1.0)

    def unclipped_delta(self, pos_a: np.ndarray, quat_a: np.ndarray, pos_b: np.ndarray,
                        quat_b: np.ndarray) -> np.ndarray:
        """:meth:`delta_between` before clipping to [-1, 1] (a magnitude above 1: faster than one step allows)."""
        lin = (np.asarray(pos_b, np.float64) - np.asarray(pos_a, np.float64)) / self.step_lin
        rel = quat_to_mat(quat_b) @ quat_to_mat(quat_a).T
        return np.r_[lin, mat_to_rpy(rel) / self.step_ang]


def deltas_from_targets(tcp_pos: np.ndarray, tcp_quat: np.ndarray, target_pos: np.ndarray, target_quat: np.ndarray,
                        policy_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Delta actions (T, 6) that :class:`CartesianDeltaIntegrator` turns into recorded absolute tool targets.

    The inverse of :meth:`CartesianDeltaIntegrator.step` over an episode: the position delta is taken from the
    measured tool position of each step, the rotation from the previous target (the first step's: the measured
    orientation), as ``step`` integrates them. Returns the clipped deltas and, per step, whether clipping
    changed them (the target moved further than one step of the env's action range reaches).
    """
    integrator = CartesianDeltaIntegrator(policy_hz)
    raw = np.zeros((len(target_pos), 6))
    previous = np.asarray(tcp_quat[0], np.float64)
    for t in range(len(target_pos)):
        raw[t] = integrator.unclipped_delta(tcp_pos[t], previous, target_pos[t], target_quat[t])
        previous = np.asarray(target_quat[t], np.float64)
    clipped = np.any(np.abs(raw) > 1.0 + 1e-6, axis=1)
    return np.clip(raw, -1.0, 1.0), clipped


def cartesian_delta_relabel(policy_hz: float) -> Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray],
                                                           float], np.ndarray]:
    """Relabel for :class:`robot_rl.learners.step_stream.StepStream`: tool motion + gripper -> 7-D action."""
    integrator = CartesianDeltaIntegrator(policy_hz)

    def relabel(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], gripper: float) -> np.ndarray:
        delta = integrator.delta_between(before["tcp_pos"], before["tcp_quat"], after["tcp_pos"], after["tcp_quat"])
        return np.r_[delta, 2.0 * float(np.clip(gripper, 0.0, 1.0)) - 1.0].astype(np.float32)

    return relabel
