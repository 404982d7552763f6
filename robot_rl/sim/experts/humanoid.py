"""Balance reference controller for the G1: ankle strategy on top of the default posture.

The PD gains of the G1's ankles (40 Nm/rad, Unitree's) are far below the ``m g h`` ~ 250 Nm/rad of
the body as an inverted pendulum, so a G1 holding a fixed posture slowly falls over. This controller
closes the balance loop from the observation only: the ankle angle error (the body's lean over the
feet) and the pelvis velocity (where the body is going) shift the ankle pitch/roll targets,
``offset = -k_lean * lean_error - k_rate * lean_rate + k_vel * velocity``; hips follow by
``hip_ratio``. Stateless: it can take over from any state. Measured (see tests/test_sim_humanoid.py):
with the env's stiff leg gains the velocity term alone works best; lean feedback and the hip strategy
made it fall more often in a small sweep, so they default to 0. Backward pushes are the weak case.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.robots import g1
from robot_rl.sim.envs.humanoid_base import ACTION_SCALE

LEGS = (g1.LEFT_LEG.start, g1.RIGHT_LEG.start)
HIP_PITCH, HIP_ROLL, ANKLE_PITCH, ANKLE_ROLL = 0, 1, 4, 5


class BalanceExpert:
    """Joint-target offsets (normalised actions) that keep the G1 upright under pushes."""

    def __init__(self, k_lean: float = 0.0, k_rate: float = 0.0, k_vel: float = 1.0, k_lat: float = 0.0,
                 hip_ratio: float = 0.0, default_q: np.ndarray | None = None) -> None:
        self.k_lean, self.k_rate, self.k_vel, self.k_lat = k_lean, k_rate, k_vel, k_lat
        self.hip_ratio = hip_ratio
        self.default_q = g1.CROUCH_Q if default_q is None else default_q

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Normalised joint-target offsets for ``robot_rl/HumanoidStand-v0`` / ``HumanoidWalk-v0``."""
        err = obs["joint_pos"].astype(np.float64) - self.default_q
        vel = obs["joint_vel"].astype(np.float64)
        v = obs["base_linvel"].astype(np.float64)
        pitch_err = np.mean([err[leg + ANKLE_PITCH] for leg in LEGS])
        pitch_rate = np.mean([vel[leg + ANKLE_PITCH] for leg in LEGS])
        roll_err = np.mean([err[leg + ANKLE_ROLL] for leg in LEGS])
        roll_rate = np.mean([vel[leg + ANKLE_ROLL] for leg in LEGS])
        sagittal = -self.k_lean * pitch_err - self.k_rate * pitch_rate + self.k_vel * v[0]
        lateral = -self.k_lat * roll_err - self.k_rate * roll_rate - self.k_vel * v[1]
        offset = np.zeros(29)
        for leg in LEGS:
            offset[leg + ANKLE_PITCH] = sagittal
            offset[leg + HIP_PITCH] = self.hip_ratio * sagittal
            offset[leg + ANKLE_ROLL] = lateral
        return np.clip(offset / ACTION_SCALE, -1.0, 1.0).astype(np.float32)
