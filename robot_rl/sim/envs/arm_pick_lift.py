"""ArmPickLift: grasp a 5 cm cube from the table and lift it 10 cm."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

import mujoco
import numpy as np

from robot_rl.robots import scenes
from robot_rl.sim.envs.arm_base import ArmEnv

LIFT_HEIGHT = 0.1
"""Success: the cube's centre is this far above its resting height [m]."""
GRASP_REWARD = 0.25
"""Reward while both fingers touch the cube."""
FINGER_BODIES = ("left_finger", "right_finger")


def finger_body_ids(model: mujoco.MjModel) -> frozenset[int]:
    """Body ids of the Panda's two fingers."""
    return frozenset(model.body(name).id for name in FINGER_BODIES)


def fingers_touching(model: mujoco.MjModel, data: mujoco.MjData, body: int, fingers: Set[int]) -> bool:
    """Both fingers are in contact with ``body`` (a grasp, not one finger pushing it)."""
    touching = set()
    for c in data.contact[: data.ncon]:
        b1, b2 = int(model.geom_bodyid[c.geom1]), int(model.geom_bodyid[c.geom2])
        if body in (b1, b2):
            touching.update({b1, b2} & fingers)
    return touching == fingers


def lift_height(cube_pos: np.ndarray) -> float:
    """How far the cube's centre is above its resting height [m]."""
    return float(cube_pos[2] - scenes.CUBE_HALF)


def lift_terms(tcp: np.ndarray, cube_pos: np.ndarray, touching: bool) -> dict[str, float]:
    """Reward terms ``reach`` (-|tcp - cube|), ``grasp`` (both fingers on it), ``lift`` (0..1), ``success``."""
    reach = float(np.linalg.norm(tcp - cube_pos))
    lift = float(np.clip(lift_height(cube_pos) / LIFT_HEIGHT, 0.0, 1.0))
    return {"reach": -reach, "grasp": GRASP_REWARD * float(touching), "lift": lift,
            "success": float(lift_success(cube_pos))}


def lift_success(cube_pos: np.ndarray) -> bool:
    """The cube is :data:`LIFT_HEIGHT` or more above its resting height."""
    return lift_height(cube_pos) >= LIFT_HEIGHT


class ArmPickLiftEnv(ArmEnv):
    """Reward terms: reach (-|tcp - cube|), grasp (+0.25, both fingers on the cube), lift (0..1), success."""

    WITH_OBJECT = True

    def _setup(self) -> None:
        super()._setup()
        self.finger_bodies = finger_body_ids(self.model)

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        xy = self._place_object(qpos, rng)
        self.goal = np.r_[xy, scenes.CUBE_HALF + LIFT_HEIGHT]
        return qpos, np.zeros(self.model.nv)

    def _fingers_touching(self) -> bool:
        return fingers_touching(self.model, self.data, self.obj_body, self.finger_bodies)

    def _reward_terms(self) -> dict[str, float]:
        return lift_terms(self.data.site_xpos[self.tcp], self.object_pos(), self._fingers_touching())

    def _is_success(self) -> bool:
        return lift_success(self.object_pos())
