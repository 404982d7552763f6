"""Per-robot constants and MuJoCo models: one module per robot (panda, g1, cf2x).

Each module holds the names (joints, actuators, sites, bodies), NAMED slices into qpos/qvel/ctrl,
the :class:`robot_rl.core.Embodiment`, and ``build_spec()`` / ``load_model()`` that compose the
robot from its PyPI model package (located by :mod:`robot_rl.robots.assets`) with ``mujoco.MjSpec``;
:mod:`robot_rl.robots.scenes` adds floor, table, objects and cameras. :func:`description` returns the
typed :class:`RobotDescription` that the runtimes (live sim, ROS nodes, envs) read instead of names.
"""

from __future__ import annotations

from types import ModuleType

from robot_rl.core import Embodiment
from robot_rl.robots import cf2x, g1, panda
from robot_rl.robots._mjspec import actuator_indices, dof_indices, qpos_indices
from robot_rl.robots.descriptions import DESCRIPTIONS, RobotDescription, description, register, unregister

ROBOTS: dict[str, ModuleType] = {"panda": panda, "g1": g1, "cf2x": cf2x}
"""Robot name -> its module."""


def robot_module(name: str) -> ModuleType:
    """The module of robot ``name``; a KeyError lists the known robots."""
    if name not in ROBOTS:
        raise KeyError(f"unknown robot {name!r}; known: {sorted(ROBOTS)}")
    return ROBOTS[name]


def embodiment(name: str) -> Embodiment:
    """The :class:`Embodiment` of robot ``name`` (from its description)."""
    return description(name).embodiment


__all__ = ["DESCRIPTIONS", "ROBOTS", "RobotDescription", "actuator_indices", "cf2x", "description",
           "dof_indices", "embodiment", "g1", "panda", "qpos_indices", "register", "robot_module",
           "unregister"]
