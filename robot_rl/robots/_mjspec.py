"""Small MjSpec edits shared by the robot modules (actuator conversion, index lookups)."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np


def to_torque_motor(actuator: mujoco.MjsActuator, effort: float) -> None:
    """Turn a position/general actuator into a plain torque motor: ``force = ctrl``, clipped at ±effort.

    The control loop (joint PD, impedance) then runs in Python at every physics step, as on the
    real robot, instead of hiding a stiff PD inside the actuator.
    """
    actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
    actuator.gainprm = np.r_[1.0, np.zeros(9)]
    actuator.biastype = mujoco.mjtBias.mjBIAS_NONE
    actuator.biasprm = np.zeros(10)
    actuator.ctrllimited = True
    actuator.ctrlrange = np.array([-effort, effort])
    actuator.forcelimited = True
    actuator.forcerange = np.array([-effort, effort])


def qpos_indices(model: mujoco.MjModel, joint_names: Sequence[str]) -> np.ndarray:
    """Return the qpos addresses of 1-DoF joints, in the order given (works in any composed scene)."""
    return np.array([model.jnt_qposadr[model.joint(n).id] for n in joint_names], dtype=np.intp)


def dof_indices(model: mujoco.MjModel, joint_names: Sequence[str]) -> np.ndarray:
    """Return the qvel addresses of 1-DoF joints, in the order given."""
    return np.array([model.jnt_dofadr[model.joint(n).id] for n in joint_names], dtype=np.intp)


def actuator_indices(model: mujoco.MjModel, actuator_names: Sequence[str]) -> np.ndarray:
    """Return the ctrl indices of the named actuators, in the order given."""
    return np.array([model.actuator(n).id for n in actuator_names], dtype=np.intp)
