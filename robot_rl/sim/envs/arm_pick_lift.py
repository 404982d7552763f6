"""ArmPickLift: grasp a 5 cm cube from the table and lift it 10 cm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from robot_rl.robots import scenes
from robot_rl.sim.envs.arm_base import ArmEnv

LIFT_HEIGHT = 0.1
"""Success: the cube's centre is this far above its resting height [m]."""


class ArmPickLiftEnv(ArmEnv):
    """Reward terms: reach (-|tcp - cube|), grasp (+0.25, both fingers on the cube), lift (0..1), success."""

    WITH_OBJECT = True

    def _setup(self) -> None:
        super()._setup()
        m = self.model
        self.finger_bodies = {m.body("left_finger").id, m.body("right_finger").id}

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        xy = self._place_object(qpos, rng)
        self.goal = np.r_[xy, scenes.CUBE_HALF + LIFT_HEIGHT]
        return qpos, np.zeros(self.model.nv)

    def _fingers_touching(self) -> bool:
        d, m = self.data, self.model
        touching = set()
        for c in d.contact[: d.ncon]:
            b1, b2 = int(m.geom_bodyid[c.geom1]), int(m.geom_bodyid[c.geom2])
            if self.obj_body in (b1, b2):
                touching.update({b1, b2} & self.finger_bodies)
        return touching == self.finger_bodies

    def _height(self) -> float:
        return float(self.object_pos()[2] - scenes.CUBE_HALF)

    def _reward_terms(self) -> dict[str, float]:
        reach = float(np.linalg.norm(self.data.site_xpos[self.tcp] - self.object_pos()))
        lift = float(np.clip(self._height() / LIFT_HEIGHT, 0.0, 1.0))
        return {"reach": -reach, "grasp": 0.25 * float(self._fingers_touching()), "lift": lift,
                "success": float(self._is_success())}

    def _is_success(self) -> bool:
        return self._height() >= LIFT_HEIGHT
