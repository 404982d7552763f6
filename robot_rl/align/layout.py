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

from robot_rl.robots.descriptions import DESCRIPTIONS, RobotDescription, description
from robot_rl.sim.alignment import feature_dim, state_features

Metric = Callable[["StateLayout", mujoco.MjModel, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _quat_angle(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Rotation angle between unit quaternions (..., 4) [rad]."""
    dot = np.abs(np.sum(q1 * q2, axis=-1)) / (np.linalg.norm(q1, axis=-1) * np.linalg.norm(q2, axis=-1) + 1e-12)
    return 2.0 * np.arccos(np.clip(dot, 0.0, 1.0))


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

        See :func:`robot_rl.sim.alignment.state_features` (the aligned simulator computes the same).
        """
        return state_features(qpos, qvel, self.free_base)

    @property
    def feature_dim(self) -> int:
        """Length of a feature vector."""
        return feature_dim(self.nq, self.nv, self.free_base)

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

def _layout(d: RobotDescription) -> StateLayout:
    """The layout of a robot from its description: its own qpos/qvel entries and how its replays are scored."""
    if d.replay is None:
        raise KeyError(f"robot {d.name!r}: its description gives no replay errors (RobotDescription.replay)")
    return StateLayout(robot=d.name, qpos_index=d.state_qpos_index, qvel_index=d.state_qvel_index,
                       free_base=d.base is not None, bodies=d.replay.bodies, errors=d.replay.errors,
                       units=d.replay.units, cost_weights=d.replay.cost_weights)


LAYOUTS: dict[str, StateLayout] = {name: _layout(d) for name, d in DESCRIPTIONS.items() if d.replay is not None}
"""Robot name -> layout of the robots described with replay errors (the Crazyflie's free base, the Panda's arm
and gripper joints, the G1's free base and 29 joints)."""


def layout_for(robot: str) -> StateLayout:
    """The layout of ``robot`` (from its description); a KeyError lists the robots that have one."""
    if robot in LAYOUTS:
        return LAYOUTS[robot]
    try:
        return _layout(description(robot))
    except KeyError:
        raise KeyError(f"no alignment state layout for robot {robot!r}; known: {sorted(LAYOUTS)}") from None
