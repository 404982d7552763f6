"""Reference flight controller for the quadrotor tasks: position -> collective thrust + body rates.

A geometric cascade at policy rate (position/velocity PD with gravity feed-forward -> desired thrust
vector -> attitude error -> body-rate command); the env's in-loop rate controller does the rest.
Stateless, so it takes over from any state.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.control.rotations import quat_to_mat
from robot_rl.robots import cf2x
from robot_rl.sim.envs.quad_base import MAX_BODY_RATE


class HoverExpert:
    """``act(obs)`` for ``thrust_body_rates`` actions; tracks ``goal_pos`` with ``goal_vel`` feed-forward."""

    def __init__(self, kp: float = 12.0, kd: float = 6.0, k_att: float = 8.0, k_yaw: float = 4.0, yaw: float = 0.0,
                 mass: float = cf2x.MASS) -> None:
        # attitude gains sized for the lagging motors (cf2x.MOTOR_TIME_CONSTANT behind a 40/s lead):
        # k_att 16 (tuned when motors acted at once) tips the drone over; yaw has the least authority
        self.kp, self.kd, self.k_att, self.k_yaw, self.yaw, self.mass = kp, kd, k_att, k_yaw, yaw, mass

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Collective thrust fraction and normalised body rates for this observation."""
        pos, vel = obs["position"].astype(np.float64), obs["linvel"].astype(np.float64)
        acc = self.kp * (obs["goal_pos"] - pos) + self.kd * (obs["goal_vel"] - vel)
        acc[:2] = np.clip(acc[:2], -6.0, 6.0)
        acc[2] = np.clip(acc[2], -6.0, 8.0) + cf2x.GRAVITY
        rot = quat_to_mat(obs["quat"])
        thrust = self.mass * float(acc @ rot[:, 2])
        z_d = acc / np.linalg.norm(acc)
        x_c = np.array([np.cos(self.yaw), np.sin(self.yaw), 0.0])
        y_d = np.cross(z_d, x_c)
        y_d /= np.linalg.norm(y_d)
        rot_d = np.stack([np.cross(y_d, z_d), y_d, z_d], axis=1)
        e = rot_d.T @ rot - rot.T @ rot_d
        e_rot = 0.5 * np.array([e[2, 1], e[0, 2], e[1, 0]])
        rates = -np.array([self.k_att, self.k_att, self.k_yaw]) * e_rot
        collective = np.clip(thrust / (4 * cf2x.THRUST_MAX), 0.0, 1.0)
        return np.r_[collective, np.clip(rates / MAX_BODY_RATE, -1.0, 1.0)].astype(np.float32)
