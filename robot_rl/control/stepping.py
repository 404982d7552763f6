"""The one physics loop with a controller inside it, and the one reader of robot state from MuJoCo.

Every loop that simulates a controlled robot (the Gymnasium envs through their backend, the live
simulation behind the ROS sim node, the controller tests and benchmarks) steps with
:func:`step_physics`: ``mj_step1`` -> the controller -> ``mj_step2`` at EVERY physics step, as on the
real robot, with the same divergence checks. :class:`StateIndex` reads a :class:`RobotState` from
``MjData`` through index arrays looked up once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.control.base import Controller, RobotState

ControlCallback = Callable[[], np.ndarray]
"""Called between ``mj_step1`` and ``mj_step2``; returns the commands of the controlled actuators."""

DIVERGENCE_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQACC,
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADCTRL,
)
"""MuJoCo warnings that mean the simulation diverged (the Python loop and the compiled one both watch them)."""


def as_slice(indices: np.ndarray | slice) -> slice | np.ndarray:
    """A slice when ``indices`` are consecutive (views are cheaper than fancy indexing every physics step)."""
    if isinstance(indices, slice):
        return indices
    idx = np.asarray(indices)
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        return slice(int(idx[0]), int(idx[0]) + idx.size)
    return idx


def _warning_count(data: mujoco.MjData) -> int:
    return int(sum(data.warning[w].number for w in DIVERGENCE_WARNINGS))


def _last_warning(data: mujoco.MjData) -> str:
    for w in DIVERGENCE_WARNINGS:
        if data.warning[w].number:
            return mujoco.mjtWarning(w).name
    return "unknown"


def step_physics(model: mujoco.MjModel, data: mujoco.MjData, n: int, actuators: np.ndarray | slice,
                 control: ControlCallback, after: Callable[[int], None] | None = None) -> str:
    """Run ``n`` steps of ``mj_step1`` -> ``control()`` -> ``mj_step2``; "" or why the simulation diverged.

    ``control()`` returns the ctrl of ``actuators``; a non-finite command stops at once. ``after(i)`` runs
    after step ``i`` (perturb, record). MuJoCo's divergence warnings and a non-finite state are checked
    once per call (MuJoCo counts warnings and resets the state itself).
    """
    warnings_before = _warning_count(data)
    for i in range(n):
        mujoco.mj_step1(model, data)
        u = control()
        if not math.isfinite(float(np.sum(u))):  # any NaN/inf makes the sum non-finite (cheapest check)
            return "controller produced a non-finite command"
        data.ctrl[actuators] = u
        mujoco.mj_step2(model, data)
        if after is not None:
            after(i)
    if _warning_count(data) != warnings_before:
        return "physics diverged (MuJoCo warning: " + _last_warning(data) + ")"
    if not (np.all(np.isfinite(data.qpos)) and np.all(np.isfinite(data.qvel))):
        return "physics diverged (non-finite state)"
    return ""


@dataclass(frozen=True)
class StateIndex:
    """Where a robot's joints (and floating base) sit in ``qpos`` / ``qvel``."""

    qpos: slice | np.ndarray
    """qpos addresses of the joints, embodiment order (a slice when consecutive)."""
    qvel: slice | np.ndarray
    """qvel addresses of the joints."""
    base_qpos: int | None = None
    """First qpos address of the floating base's free joint (position, then quaternion w x y z)."""
    base_qvel: int | None = None
    """First qvel address of the free joint (world linear velocity, then body angular velocity)."""

    def __post_init__(self) -> None:
        if (self.base_qpos is None) != (self.base_qvel is None):
            raise ValueError("StateIndex.base_qpos/base_qvel: give both or neither")
        object.__setattr__(self, "qpos", as_slice(self.qpos))
        object.__setattr__(self, "qvel", as_slice(self.qvel))

    @classmethod
    def from_model(cls, model: mujoco.MjModel, joint_names: Sequence[str],
                   free_joint: str | None = None) -> StateIndex:
        """Look the named 1-DoF joints (and free joint) up in ``model``.

        Raises:
            KeyError: naming the joints the model lacks.
        """
        names = [*joint_names, *([free_joint] if free_joint else [])]
        ids = {n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names}
        missing = [n for n, i in ids.items() if i < 0]
        if missing:
            raise KeyError(f"joints not in the model: {missing}")
        qpos = np.array([model.jnt_qposadr[ids[n]] for n in joint_names], dtype=np.intp)
        qvel = np.array([model.jnt_dofadr[ids[n]] for n in joint_names], dtype=np.intp)
        if free_joint is None:
            return cls(qpos, qvel)
        return cls(qpos, qvel, int(model.jnt_qposadr[ids[free_joint]]), int(model.jnt_dofadr[ids[free_joint]]))

    def read(self, data: mujoco.MjData, copy: bool = False) -> RobotState:
        """The state in ``data``; views into it unless ``copy`` (views are for a state used at once)."""
        q, dq = data.qpos[self.qpos], data.qvel[self.qvel]
        if copy:
            q, dq = q.copy(), dq.copy()
        state = RobotState(q, dq, float(data.time))
        if self.base_qpos is not None and self.base_qvel is not None:
            p, v = self.base_qpos, self.base_qvel
            state.base_pos = data.qpos[p:p + 3].copy()
            state.base_quat = data.qpos[p + 3:p + 7].copy()
            state.base_linvel = data.qvel[v:v + 3].copy()
            state.base_angvel = data.qvel[v + 3:v + 6].copy()
        return state


def run_controller(model: mujoco.MjModel, data: mujoco.MjData, controller: Controller,
                   read_state: Callable[[mujoco.MjData], RobotState], ctrl_idx: slice | np.ndarray,
                   steps: int, callback: Callable[[int], None] | None = None,
                   actuate: Callable[[np.ndarray], np.ndarray] | None = None) -> str:
    """:func:`step_physics` with ``controller`` closing the loop on ``read_state(data)`` at every step.

    ``callback(i)`` runs after step ``i``; ``actuate`` maps the controller's commands to ctrl values
    (e.g. a motor model), identity when None. Returns "" or why the simulation diverged.
    """
    def control() -> np.ndarray:
        cmd = controller.compute(read_state(data), float(data.time))
        return cmd if actuate is None else actuate(cmd)

    return step_physics(model, data, steps, ctrl_idx, control, callback)
