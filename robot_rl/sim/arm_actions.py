"""Cartesian delta actions of the arm envs, re-exported from :mod:`robot_rl.runtime.arm_actions`.

The rule lives in the runtime (its action interpreters and the ROS policy node use it too, and the runtime
sits below the simulation); the arm envs, experts and tests keep importing it from here.
"""

from __future__ import annotations

from robot_rl.runtime.arm_actions import (
    MAX_ANG_SPEED,
    MAX_LIN_SPEED,
    WORKSPACE,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    CartesianDeltaIntegrator,
    cartesian_delta_relabel,
    deltas_from_targets,
    rpy_matrix,
    workspace,
)

__all__ = ["MAX_ANG_SPEED", "MAX_LIN_SPEED", "WORKSPACE", "WORKSPACE_HIGH", "WORKSPACE_LOW",
           "CartesianDeltaIntegrator", "cartesian_delta_relabel", "deltas_from_targets", "rpy_matrix", "workspace"]
