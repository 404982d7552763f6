"""Per-robot constants and MuJoCo models: one module per robot (panda, g1, cf2x).

Each module holds the names (joints, actuators, sites, bodies), NAMED slices into qpos/qvel/ctrl,
the :class:`robot_rl.core.Embodiment`, and ``build_spec()`` / ``load_model()`` that compose the
robot from its PyPI model package with ``mujoco.MjSpec``. Scenes in ``robot_rl.sim`` add the rest.
"""

from __future__ import annotations

from types import ModuleType

from robot_rl.core import Embodiment
from robot_rl.robots import cf2x, g1, panda
from robot_rl.robots._mjspec import actuator_indices, dof_indices, qpos_indices

ROBOTS: dict[str, ModuleType] = {"panda": panda, "g1": g1, "cf2x": cf2x}
"""Robot name -> its module."""


def robot_module(name: str) -> ModuleType:
    """The module of robot ``name``; a KeyError lists the known robots."""
    if name not in ROBOTS:
        raise KeyError(f"unknown robot {name!r}; known: {sorted(ROBOTS)}")
    return ROBOTS[name]


def embodiment(name: str) -> Embodiment:
    """The :class:`Embodiment` of robot ``name``."""
    return robot_module(name).EMBODIMENT


__all__ = ["ROBOTS", "actuator_indices", "cf2x", "dof_indices", "embodiment", "g1", "panda",
           "qpos_indices", "robot_module"]
