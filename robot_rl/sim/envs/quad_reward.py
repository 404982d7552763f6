"""The quadrotor tasks' reward and crash rules: one definition for the single envs and the batched one.

Every function works on arrays of any leading shape (one drone: (3,) vectors; N drones: (N, 3)), so
:class:`robot_rl.sim.envs.quad_base.QuadEnv` and :class:`robot_rl.sim.batched_quad.BatchedQuadHover` score
and end episodes by the same numbers.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

MIN_HEIGHT = 0.1
MAX_TILT_COS = float(np.cos(np.radians(80.0)))
MAX_DISTANCE = 3.0
"""Crash: below MIN_HEIGHT (the collision sphere touches the floor at 0.065 m), tilted beyond 80 deg,
or farther than MAX_DISTANCE from the goal."""


def reward_terms(distance: ArrayLike, vel_error: ArrayLike, up_z: ArrayLike, angvel: ArrayLike
                 ) -> dict[str, np.ndarray]:
    """Reward terms, each of the drones' leading shape.

    Args:
        distance: distance to the goal [m], shape (...).
        vel_error: velocity minus the goal's velocity [m/s], (..., 3).
        up_z: world z component of the body z axis (1 upright), (...).
        angvel: body rates [rad/s], (..., 3).
    """
    return {
        "position": -np.asarray(distance),
        "velocity": -0.1 * np.linalg.norm(vel_error, axis=-1),
        "upright": -0.2 * (1.0 - np.asarray(up_z)),
        "body_rates": -0.01 * np.linalg.norm(angvel, axis=-1),
        "alive": np.full(np.shape(distance), 0.5),
    }


def crashed(height: ArrayLike, up_z: ArrayLike, distance: ArrayLike) -> np.ndarray:
    """Whether drones at base ``height`` [m], with ``up_z`` and ``distance`` from the goal have crashed."""
    return (np.asarray(height) < MIN_HEIGHT) | (np.asarray(up_z) < MAX_TILT_COS) | (np.asarray(distance) > MAX_DISTANCE)
