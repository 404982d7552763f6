"""Run a controller inside MuJoCo the way the simulator does: ``mj_step1``, compute, ``mj_step2``.

Used by the controller tests and benchmarks; the simulation envs do the same with their own state
readers. ``joint_state`` / ``free_body_state`` read a :class:`RobotState` from named index arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from robot_rl.control.base import Controller, RobotState


def joint_indices(model: mujoco.MjModel, joint_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The qpos and qvel addresses of 1-DoF joints, in the given order."""
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in joint_names]
    if min(ids, default=0) < 0:
        missing = [n for n, i in zip(joint_names, ids) if i < 0]
        raise KeyError(f"joints not in the model: {missing}")
    return (np.array([model.jnt_qposadr[i] for i in ids], dtype=np.intp),
            np.array([model.jnt_dofadr[i] for i in ids], dtype=np.intp))


def joint_state(data: mujoco.MjData, qpos_idx: np.ndarray, dof_idx: np.ndarray,
                free_qpos: int | None = None, free_dof: int | None = None) -> RobotState:
    """The state of the indexed joints (and of a free joint whose qpos/qvel addresses are given)."""
    state = RobotState(data.qpos[qpos_idx], data.qvel[dof_idx], float(data.time))
    if free_qpos is not None and free_dof is not None:
        state.base_pos = data.qpos[free_qpos:free_qpos + 3].copy()
        state.base_quat = data.qpos[free_qpos + 3:free_qpos + 7].copy()
        state.base_linvel = data.qvel[free_dof:free_dof + 3].copy()
        state.base_angvel = data.qvel[free_dof + 3:free_dof + 6].copy()
    return state


def run_controller(model: mujoco.MjModel, data: mujoco.MjData, controller: Controller,
                   read_state: Callable[[mujoco.MjData], RobotState], ctrl_idx: slice | np.ndarray,
                   steps: int, callback: Callable[[int], None] | None = None,
                   actuate: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    """Step physics ``steps`` times with the controller closing the loop at every step.

    ``callback(i)`` runs after step ``i`` (apply perturbations, record); ``actuate`` maps the
    controller's commands to ctrl values (e.g. a motor model), identity when None.
    """
    for i in range(steps):
        mujoco.mj_step1(model, data)
        cmd = controller.compute(read_state(data), float(data.time))
        data.ctrl[ctrl_idx] = cmd if actuate is None else actuate(cmd)
        mujoco.mj_step2(model, data)
        if callback is not None:
            callback(i)
