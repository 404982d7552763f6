"""Damped-least-squares differential inverse kinematics on a scratch MjData.

Used at POLICY rate to turn a Cartesian target into joint targets for the joint PD in the loop
(kinematics only; the compliant Cartesian controller belongs to ``robot_rl.control``).
"""

from __future__ import annotations

import mujoco
import numpy as np


def orientation_error(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation vector (small-angle) that turns ``current`` into ``target`` (3x3 matrices, world frame)."""
    return 0.5 * np.sum(np.cross(current.T, target.T), axis=0)


class DiffIK:
    """Iterates ``dq = J^T (J J^T + lambda^2 I)^-1 e`` with a null-space pull to a nominal posture."""

    def __init__(self, model: mujoco.MjModel, site: str, qpos_idx: np.ndarray, dof_idx: np.ndarray,
                 lower: np.ndarray, upper: np.ndarray, nominal: np.ndarray, damping: float = 0.05,
                 nullspace_gain: float = 0.05) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.site = model.site(site).id
        self.qpos_idx, self.dof_idx = qpos_idx, dof_idx
        self.lower, self.upper = lower, upper
        self.nominal = nominal
        self.damping = damping
        self.nullspace_gain = nullspace_gain
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position and rotation matrix at joint angles ``q``."""
        self.data.qpos[self.qpos_idx] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site].copy(), self.data.site_xmat[self.site].reshape(3, 3).copy()

    def solve(self, q: np.ndarray, pos: np.ndarray, rot: np.ndarray, iterations: int = 4,
              max_step: float = 0.2) -> np.ndarray:
        """Joint angles near ``q`` that put the site at ``pos`` with orientation ``rot``."""
        q = np.array(q, dtype=np.float64)
        n = len(q)
        for _ in range(iterations):
            p, r = self.forward(q)
            err = np.r_[pos - p, orientation_error(r, rot)]
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site)
            jac = np.vstack([self._jacp[:, self.dof_idx], self._jacr[:, self.dof_idx]])
            jjt = jac @ jac.T + self.damping**2 * np.eye(6)
            pinv = jac.T @ np.linalg.solve(jjt, np.eye(6))
            dq = pinv @ err + (np.eye(n) - pinv @ jac) @ (self.nullspace_gain * (self.nominal - q))
            dq = np.clip(dq, -max_step, max_step)
            q = np.clip(q + dq, self.lower, self.upper)
        return q
