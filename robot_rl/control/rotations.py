"""Quaternion / rotation helpers (w, x, y, z convention, as MuJoCo), thin wrappers of MuJoCo's ``mju_*`` routines.

MuJoCo's C routines cost about a microsecond per call, so these are cheap enough for code that runs at
every physics step; code off the hot path can use ``scipy.spatial.transform.Rotation`` (with
``scalar_first=True`` for this convention) directly.
"""

from __future__ import annotations

import math

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
    """Unit quaternion (w >= 0) of a 3x3 rotation matrix."""
    out = np.empty(4)
    mujoco.mju_mat2Quat(out, np.ascontiguousarray(r, dtype=np.float64).reshape(9))
    return quat_normalize(out)


def mat_to_rpy(r: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw [rad] of a rotation matrix about the fixed x, y, z axes (``R = Rz(yaw) Ry(pitch) Rx(roll)``).

    The inverse of ``mju_euler2Quat(..., "XYZ")`` and scipy's ``as_euler("xyz")`` (without its import, ~0.3 s
    of every actor's start-up). At pitch +-90 deg only roll -+ yaw is defined: roll is 0 there, as scipy's.
    """
    r = np.asarray(r, dtype=np.float64)
    cos_pitch = math.hypot(r[2, 1], r[2, 2])
    pitch = math.atan2(-r[2, 0], cos_pitch)
    if cos_pitch < 1e-9:
        return np.array([0.0, pitch, math.atan2(-r[0, 1], r[1, 1])])
    return np.array([math.atan2(r[2, 1], r[2, 2]), pitch, math.atan2(r[1, 0], r[0, 0])])


def quat_yaw(q: np.ndarray) -> float:
    """Heading [rad] of the body x axis in the world xy plane (the first angle of a Z-Y-X Euler split).

    Scale-free: ``q`` need not be normalised.
    """
    m = np.empty(9)
    mujoco.mju_quat2Mat(m, np.asarray(q, dtype=np.float64))
    return float(np.arctan2(m[3], m[0]))


def mat_yaw(rot: np.ndarray) -> float:
    """Heading [rad] of a rotation matrix's x axis in the world xy plane (what :func:`quat_yaw` returns)."""
    r = np.asarray(rot)
    return float(np.arctan2(r[1, 0], r[0, 0]))


def heading_planar(rot: np.ndarray, v_world: np.ndarray) -> np.ndarray:
    """A world-frame vector's (x, y) in the heading frame of ``rot`` (rotated by -yaw): a walker's vx, vy."""
    h = mat_yaw(rot)
    c, s = np.cos(h), np.sin(h)
    return np.array([c * v_world[0] + s * v_world[1], -s * v_world[0] + c * v_world[1]])


def quat_slerp(a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """Spherical interpolation ``alpha`` of the way from ``a`` to ``b`` (short arc, either sign of ``b``)."""
    q = quat_normalize(a)
    rv = np.empty(3)
    mujoco.mju_subQuat(rv, np.asarray(b, dtype=np.float64) / np.linalg.norm(b), q)  # q * exp(rv) = b, |rv| <= pi
    mujoco.mju_quatIntegrate(q, rv, float(alpha))  # q <- q * exp(alpha rv)
    return quat_normalize(q)
