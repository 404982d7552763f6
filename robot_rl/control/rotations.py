"""Quaternion / rotation helpers (w, x, y, z convention, as MuJoCo), on top of MuJoCo's own routines."""

from __future__ import annotations

import mujoco
import numpy as np


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Unit quaternion with w >= 0 (one of the two equal rotations, so blends take the short way)."""
    q = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return -q if q[0] < 0 else q


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """3x3 rotation matrix of a unit quaternion."""
    out = np.empty(9)
    mujoco.mju_quat2Mat(out, np.asarray(q, dtype=np.float64))
    return out.reshape(3, 3)


def mat_to_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternion of a 3x3 rotation matrix."""
    out = np.empty(4)
    mujoco.mju_mat2Quat(out, np.ascontiguousarray(r, dtype=np.float64).reshape(9))
    return quat_normalize(out)


def rotvec_from_mat(r: np.ndarray) -> np.ndarray:
    """Axis-angle vector (log map) of a rotation matrix, angle in [0, pi]."""
    q = mat_to_quat(r)
    out = np.empty(3)
    mujoco.mju_quat2Vel(out, q, 1.0)
    return out


def mat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """Rotation matrix of an axis-angle vector (exp map)."""
    angle = float(np.linalg.norm(v))
    q = np.array([1.0, 0.0, 0.0, 0.0])
    if angle > 0:
        mujoco.mju_axisAngle2Quat(q, np.asarray(v, dtype=np.float64) / angle, angle)
    return quat_to_mat(q)


def quat_slerp(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """Spherical interpolation ``alpha`` of the way from ``a`` to ``b`` (short arc)."""
    a = quat_normalize(a)
    b = np.asarray(b, dtype=np.float64) / np.linalg.norm(b)
    if np.dot(a, b) < 0:
        b = -b
    dot = float(np.clip(np.dot(a, b), -1.0, 1.0))
    if dot > 0.9995:
        return quat_normalize(a + alpha * (b - a))
    theta = np.arccos(dot)
    return quat_normalize((np.sin((1 - alpha) * theta) * a + np.sin(alpha * theta) * b) / np.sin(theta))
