"""What a robot's recorded state is, how a replay is scored against it, and what the delta models see.

A real robot's log holds its measured joint state: joint encoders, and for floating bases the motion-capture
pose and the estimator's velocities (ASAP records the same 59 values for the G1: base pose and twist, joint
angles and rates). Here that is the robot's own entries of MuJoCo's ``qpos`` / ``qvel`` (named slices of
:mod:`robot_rl.robots`), so a recorded state can be written back into the simulator to start a replay.

Each layout also names the errors a replay is judged by (ASAP's metrics, per robot: joint error, end-effector
or body positions, quadrotor position and attitude) and the features the delta models read: the state
without the quantities the dynamics do not depend on (a quadrotor's or a humanoid's absolute x-y position),
so a correction learnt in one place applies everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.robots import cf2x, g1, panda

Metric = Callable[["StateLayout", mujoco.MjModel, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _quat_angle(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Rotation angle between unit quaternions (..., 4) [rad]."""
    dot = np.abs(np.sum(q1 * q2, axis=-1)) / (np.linalg.norm(q1, axis=-1) * np.linalg.norm(q2, axis=-1) + 1e-12)
    return 2.0 * np.arccos(np.clip(dot, 0.0, 1.0))


def _rotate_inverse(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """``vec`` (N, 3) expressed in the frame of the wxyz quaternions ``quat`` (N, 4)."""
    w, xyz = quat[:, :1], -quat[:, 1:]
    t = 2.0 * np.cross(xyz, vec)
    return vec + w * t + np.cross(xyz, t)


@dataclass(frozen=True)
class StateLayout:
    """One robot's recorded state, its replay errors and its delta-model features."""

    robot: str
    """Robot name (``robot_rl.robots``)."""
    qpos_index: np.ndarray
    """Indices of the robot's entries in ``data.qpos`` (what the log records as ``qpos``)."""
    qvel_index: np.ndarray
    """Indices of its entries in ``data.qvel`` (recorded as ``qvel``)."""
    free_base: bool
    """Whether qpos starts with a free joint (position, wxyz quaternion) and qvel with its twist."""
    bodies: tuple[str, ...]
    """Bodies whose world positions the body-position error compares (forward kinematics)."""
    errors: tuple[str, ...]
    """Names of the replay errors reported, first the one fits minimise (see :meth:`error`)."""
    units: tuple[str, ...]
    """Unit of each error."""
    cost_weights: tuple[float, ...]
    """Weight of each error in the scalar cost that system identification minimises."""

    @property
    def nq(self) -> int:
        """Recorded qpos values."""
        return len(self.qpos_index)

    @property
    def nv(self) -> int:
        """Recorded qvel values."""
        return len(self.qvel_index)

    def features(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """Delta-model inputs (N, F) of states (N, nq) / (N, nv): what the dynamics depend on.

        Free bases keep the height but not the x-y position and give their orientation as the gravity
        direction in the body frame (ASAP's "projected gravity"), their linear velocity in the body frame:
        the dynamics are the same at every place and heading, so a correction learnt at one applies at all.
        Joint states pass unchanged.
        """
        qpos, qvel = np.atleast_2d(qpos), np.atleast_2d(qvel)
        if not self.free_base:
            return np.concatenate([qpos, qvel], axis=1)
        quat = qpos[:, 3:7] / np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
        gravity = _rotate_inverse(quat, np.broadcast_to([0.0, 0.0, -1.0], (len(quat), 3)))
        lin_body = _rotate_inverse(quat, qvel[:, 0:3])
        return np.concatenate([qpos[:, 2:3], gravity, qpos[:, 7:], lin_body, qvel[:, 3:]], axis=1)

    @property
    def feature_dim(self) -> int:
        """Length of a feature vector."""
        return int(self.features(np.r_[np.zeros(3), 1.0, np.zeros(self.nq - 4)] if self.free_base
                                 else np.zeros(self.nq), np.zeros(self.nv)).shape[1])

    def error(self, model: mujoco.MjModel, qpos_sim: np.ndarray, qvel_sim: np.ndarray, qpos_real: np.ndarray,
              qvel_real: np.ndarray) -> dict[str, np.ndarray]:
        """Each error of simulated vs recorded states (..., nq) / (..., nv), elementwise over the leading axes."""
        out: dict[str, np.ndarray] = {}
        for name in self.errors:
            out[name] = _METRICS[name](self, model, qpos_sim, qvel_sim, qpos_real, qvel_real)
        return out

    def cost(self, errors: dict[str, np.ndarray]) -> np.ndarray:
        """The weighted sum of the errors (what system identification minimises)."""
        return sum(w * errors[n] for n, w in zip(self.errors, self.cost_weights))  # type: ignore[return-value]

    def normalize(self, qpos: np.ndarray) -> np.ndarray:
        """``qpos`` with the base quaternion made unit length (after adding a correction to it)."""
        if self.free_base:
            qpos = np.array(qpos, dtype=np.float64)
            qpos[..., 3:7] /= np.linalg.norm(qpos[..., 3:7], axis=-1, keepdims=True)
        return qpos


@functools.lru_cache(maxsize=4)
def _scratch_data(model: mujoco.MjModel) -> mujoco.MjData:
    """One kinematics scratch MjData per model (errors are computed every replay step; allocating it is not free)."""
    return mujoco.MjData(model)


def _body_positions(layout: StateLayout, model: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
    """World positions (..., B, 3) of ``layout.bodies`` for robot states ``qpos`` (forward kinematics)."""
    flat = qpos.reshape(-1, qpos.shape[-1])
    data = _scratch_data(model)
    ids = [model.body(b).id for b in layout.bodies]
    out = np.empty((len(flat), len(ids), 3))
    for i, q in enumerate(flat):
        data.qpos[layout.qpos_index] = q
        mujoco.mj_kinematics(model, data)
        out[i] = data.xpos[ids]
    return out.reshape(*qpos.shape[:-1], len(ids), 3)


def _joint_error(layout: StateLayout, model: mujoco.MjModel, qs: np.ndarray, vs: np.ndarray, qr: np.ndarray,
                 vr: np.ndarray) -> np.ndarray:
    start = 7 if layout.free_base else 0
    return np.mean(np.abs(qs[..., start:] - qr[..., start:]), axis=-1)


def _body_error(layout: StateLayout, model: mujoco.MjModel, qs: np.ndarray, vs: np.ndarray, qr: np.ndarray,
                vr: np.ndarray) -> np.ndarray:
    diff = _body_positions(layout, model, qs) - _body_positions(layout, model, qr)
    return np.mean(np.linalg.norm(diff, axis=-1), axis=-1)


def _position_error(layout: StateLayout, model: mujoco.MjModel, qs: np.ndarray, vs: np.ndarray, qr: np.ndarray,
                    vr: np.ndarray) -> np.ndarray:
    return np.linalg.norm(qs[..., 0:3] - qr[..., 0:3], axis=-1)


def _attitude_error(layout: StateLayout, model: mujoco.MjModel, qs: np.ndarray, vs: np.ndarray, qr: np.ndarray,
                    vr: np.ndarray) -> np.ndarray:
    return _quat_angle(qs[..., 3:7], qr[..., 3:7])


_METRICS: dict[str, Metric] = {
    "joint": _joint_error, "body_position": _body_error, "position": _position_error, "attitude": _attitude_error}
"""``joint``: mean absolute joint-angle error [rad] (MPJPE in joint space); ``body_position``: mean distance
of the layout's bodies [m] (ASAP's global MPJPE; the end effector for an arm); ``position`` / ``attitude``:
base position [m] and rotation angle [rad]."""

_G1_BODIES = ("pelvis", "left_ankle_roll_link", "right_ankle_roll_link", "left_knee_link", "right_knee_link",
              "torso_link", "left_wrist_yaw_link", "right_wrist_yaw_link", "left_elbow_link", "right_elbow_link")

LAYOUTS: dict[str, StateLayout] = {
    "cf2x": StateLayout(
        robot="cf2x", qpos_index=np.arange(cf2x.QPOS_BASE_QUAT.stop),
        qvel_index=np.arange(cf2x.QVEL_BASE_ANGVEL.stop), free_base=True, bodies=(),
        errors=("position", "attitude"), units=("m", "rad"), cost_weights=(1.0, 1.0)),
    "panda": StateLayout(
        robot="panda", qpos_index=np.arange(panda.QPOS_GRIPPER.stop),
        qvel_index=np.arange(panda.QVEL_GRIPPER.stop), free_base=False,
        bodies=("hand",), errors=("body_position", "joint"), units=("m", "rad"), cost_weights=(1.0, 0.1)),
    "g1": StateLayout(
        robot="g1", qpos_index=np.arange(g1.QPOS_JOINTS.stop),
        qvel_index=np.arange(g1.QVEL_JOINTS.stop), free_base=True, bodies=_G1_BODIES,
        errors=("body_position", "joint", "position", "attitude"), units=("m", "rad", "m", "rad"),
        cost_weights=(1.0, 0.1, 0.0, 0.0)),
}
"""Robot name -> layout, from the robots' named slices: the Crazyflie's free base, the Panda's arm and
gripper joints, the G1's free base and 29 joints."""


def layout_for(robot: str) -> StateLayout:
    """The layout of ``robot``; a KeyError lists the robots that have one."""
    if robot not in LAYOUTS:
        raise KeyError(f"no alignment state layout for robot {robot!r}; known: {sorted(LAYOUTS)}")
    return LAYOUTS[robot]
