"""Kinematics and dynamics of an arm from a MuJoCo model: the controller's "Pinocchio".

In simulation it READS the simulator's ``MjData`` right after ``mj_step1`` (which has already
computed poses, Jacobians' ingredients, the inertia matrix and ``qfrc_bias``), so the model costs
nothing extra. On a real robot it owns an ``MjData`` and fills it from measured q/dq with
``mj_fwdPosition`` + ``mj_fwdVelocity`` (a MuJoCo model of the robot as the kinematics/dynamics
library). Either way the controller sees the same quantities, restricted to the arm's joints.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from robot_rl.control.base import RobotState
from robot_rl.core.spaces import SpecError


class MujocoArmModel:
    """End-effector pose, site Jacobian, mass matrix, gravity and Coriolis of the listed joints.

    Args:
        model: The compiled model (the robot alone or a scene containing it).
        joint_names: The arm's joints, in the controller's order (hinge/slide joints).
        site: Name of the end-effector site.
        data: The simulator's data to read (shared mode); None to own one (real-robot mode).
    """

    def __init__(self, model: mujoco.MjModel, joint_names: Sequence[str], site: str,
                 data: mujoco.MjData | None = None) -> None:
        self.model = model
        self.owns_data = data is None
        self.data = mujoco.MjData(model) if data is None else data
        ids = []
        for name in joint_names:
            jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            if jid < 0:
                raise SpecError(f"MujocoArmModel: joint {name!r} not in the model")
            if int(model.jnt_type[jid]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
                raise SpecError(f"MujocoArmModel: joint {name!r} is not a hinge or slide joint")
            ids.append(jid)
        self.qpos_idx = np.array([model.jnt_qposadr[j] for j in ids], dtype=np.intp)
        self.dof_idx = np.array([model.jnt_dofadr[j] for j in ids], dtype=np.intp)
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if self.site_id < 0:
            raise SpecError(f"MujocoArmModel: site {site!r} not in the model")
        # Root body of the arm: the subtree whose mass gravity acts on through these joints.
        self.root_body = int(model.jnt_bodyid[ids[0]])
        self.n = len(ids)
        # Column selection: a slice (a view, no copy) when the arm's dofs are contiguous, as usual.
        first = int(self.dof_idx[0])
        contiguous = np.array_equal(self.dof_idx, np.arange(first, first + self.n))
        self._cols: slice | np.ndarray = slice(first, first + self.n) if contiguous else self.dof_idx
        self._jac_full = np.zeros((6, model.nv))
        self._jacp = self._jac_full[:3]
        self._jacr = self._jac_full[3:]
        self._jac = np.zeros((6, self.n))
        self._jm_full = np.zeros((6, model.nv))
        self._jac_com = np.zeros((3, model.nv))
        self._m_full = np.zeros((model.nv, model.nv))
        self._mesh = np.ix_(self.dof_idx, self.dof_idx)

    def update(self, state: RobotState) -> None:
        """Bring the model to ``state`` (owned data only; shared data is already current after ``mj_step1``)."""
        if state.q.shape != (self.n,):
            raise SpecError(f"MujocoArmModel.update: expected {self.n} joints, got {state.q.shape}")
        if not self.owns_data:
            return
        self.data.qpos[self.qpos_idx] = state.q
        self.data.qvel[self.dof_idx] = state.dq
        mujoco.mj_fwdPosition(self.model, self.data)
        mujoco.mj_fwdVelocity(self.model, self.data)

    def ee_position(self) -> np.ndarray:
        """End-effector site position in the world frame [m] (a view: copy before storing)."""
        return self.data.site_xpos[self.site_id]

    def ee_rotation(self) -> np.ndarray:
        """End-effector site orientation, 3x3 rotation matrix (world from site)."""
        return self.data.site_xmat[self.site_id].reshape(3, 3)

    def jacobian(self) -> np.ndarray:
        """6 x n site Jacobian (linear rows, then angular rows; world frame) of the arm joints.

        The returned array is reused by the next call: copy it to keep it.
        """
        mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
        self._jac[:] = self._jac_full[:, self._cols]
        return self._jac

    def jacobian_inverse_inertia(self) -> np.ndarray:
        """``J M⁻¹`` (6 x n) for the Jacobian of the last :meth:`jacobian` call.

        Uses MuJoCo's sparse factorisation of the whole model's M (already computed by
        ``mj_step1``/``mj_fwdPosition``), so the inverse is the arm block of ``M⁻¹``: the hand and
        fingers move with the arm as they really do.
        """
        mujoco.mj_solveM(self.model, self.data, self._jm_full, self._jac_full)
        return self._jm_full[:, self._cols]

    def mass_matrix(self) -> np.ndarray:
        """Joint-space inertia (n x n of the arm joints, armature included)."""
        mujoco.mj_fullM(self.model, self.data, self._m_full)
        return self._m_full[self._mesh]

    def bias(self) -> np.ndarray:
        """Gravity + Coriolis/centrifugal torques ``C(q, dq) dq + g(q)`` on the arm joints."""
        return self.data.qfrc_bias[self._cols].copy()

    def gravity(self) -> np.ndarray:
        """Gravity torques ``g(q)`` on the arm joints (everything the arm carries, gripper included)."""
        mujoco.mj_jacSubtreeCom(self.model, self.data, self._jac_com, self.root_body)
        mass = self.model.body_subtreemass[self.root_body]
        return -mass * (self._jac_com[:, self.dof_idx].T @ self.model.opt.gravity)
