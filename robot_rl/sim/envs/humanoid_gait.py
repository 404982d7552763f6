"""The gait recipe of learnt G1 walking: a periodic clock, foot contact by height, and its reward terms.

Policies that walk a real G1 from its own sensors (unitree_rl_gym, MuJoCo Playground's G1 joystick) are
trained with a phase clock in the observation and rewards that shape the gait around it: each foot is in
stance in the first ``STANCE_SHARE`` of its phase and swinging, at ``SWING_HEIGHT`` above the floor, in the
rest; the legs are half a period apart. Without these terms PPO on 2 CPU cores finds standing still and
shuffling long before walking (benchmarks/README.md, "G1 walking"). Weights follow unitree_rl_gym's
``G1RoughCfg`` (github.com/unitreerobotics/unitree_rl_gym), with its tracking kernels (sigma 0.25).

Everything here reads only the simulator's state; the policy's observation is the env's business.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.core import SpecError
from robot_rl.robots import g1

GAIT_CLOCK = "gait_clock"
"""Observation key of the clock (the policy node feeds it on a graph from its own clock)."""
GAIT_PERIOD_S = 0.8
"""One full gait cycle (a left and a right step) [s] (unitree_rl_gym's G1)."""
STANCE_SHARE = 0.55
"""Share of a leg's phase it should be on the ground."""
CONTACT_HEIGHT = 0.05
"""A foot whose sole site is below this [m] counts as on the ground (standing: 0.035)."""
SWING_HEIGHT = 0.10
"""Sole-site height asked of a swinging foot [m] (~6.5 cm clearance)."""
HIP_ROLL_YAW = np.array([1, 2, 7, 8])
"""Indices of the hip roll and yaw joints in Unitree's order (kept near zero: no splayed or twisted legs)."""

WEIGHTS = {
    "lin_vel_tracking": 1.0, "ang_vel_tracking": 0.5, "alive": 0.15, "contact": 0.18,
    "lin_vel_z": -2.0, "ang_vel_xy": -0.05, "orientation": -1.0, "base_height": -10.0,
    "dof_acc": -2.5e-7, "dof_vel": -1e-3, "action_rate": -0.01, "hip_pos": -1.0,
    "contact_no_vel": -0.2, "feet_swing_height": -20.0, "upper_posture": -0.5,
}
"""Weight of each raw term (the env reports weighted terms; their sum is the reward). HumanoidWalk's
``reward_weights`` overrides some (the shipped config does, for this G1's stiffer joint PD)."""


def leg_phases(t: float) -> np.ndarray:
    """Phase in [0, 1) of the left and the right leg at time ``t`` since the episode started."""
    phase = (t / GAIT_PERIOD_S) % 1.0
    return np.array([phase, (phase + 0.5) % 1.0])


def gait_clock(t: float) -> np.ndarray:
    """The clock a policy observes: sin and cos of the left leg's phase angle (what a robot computes itself)."""
    angle = 2.0 * np.pi * leg_phases(t)[0]
    return np.array([np.sin(angle), np.cos(angle)], dtype=np.float32)


@dataclass
class GaitState:
    """What the terms difference across policy steps: the legs' joint velocities and the feet's positions."""

    dq: np.ndarray
    feet: np.ndarray


class GaitReward:
    """unitree_rl_gym's G1 walking terms over one env's MuJoCo state."""

    def __init__(self, model: mujoco.MjModel, q_idx: np.ndarray, dq_idx: np.ndarray, default_q: np.ndarray,
                 policy_dt: float, weights: Mapping[str, float] | None = None) -> None:
        unknown = sorted(set(weights or {}) - set(WEIGHTS))
        if unknown:
            raise SpecError(f"reward_weights: unknown terms {unknown}; the gait reward has {sorted(WEIGHTS)}")
        self.weights = {**WEIGHTS, **{k: float(v) for k, v in (weights or {}).items()}}
        self.sites = np.array([model.site(g1.LEFT_FOOT_SITE).id, model.site(g1.RIGHT_FOOT_SITE).id])
        self.q_idx, self.dq_idx, self.default_q, self.dt = q_idx, dq_idx, default_q, policy_dt
        self.prev = GaitState(np.zeros(12), np.zeros((2, 3)))

    def reset(self, data: mujoco.MjData) -> None:
        """Start the differences from the state after a reset."""
        self.prev = GaitState(data.qvel[self.dq_idx][g1.LEGS].copy(), data.site_xpos[self.sites].copy())

    def terms(self, data: mujoco.MjData, t: float, v_err: float, wz_err: float, body_linvel: np.ndarray,
              body_angvel: np.ndarray, gravity: np.ndarray, height: float, action_rate: float) -> dict[str, float]:
        """Weighted terms for the state after a policy step (errors: squared velocity errors).

        Written for speed (it runs every env step, ~40 % of the Python part of one before): dot products
        instead of ``np.sum`` on small arrays, each state array read once.
        """
        q, dq = data.qpos[self.q_idx], data.qvel[self.dq_idx]
        feet = data.site_xpos[self.sites]
        feet_vel = (feet - self.prev.feet) / self.dt
        contact = feet[:, 2] < CONTACT_HEIGHT
        stance = leg_phases(t) < STANCE_SHARE
        legs_dq = dq[g1.LEGS]
        acc = (legs_dq - self.prev.dq) / self.dt
        hips = q[HIP_ROLL_YAW] - self.default_q[HIP_ROLL_YAW]
        upper = q[12:] - self.default_q[12:]
        swing = feet[:, 2] - SWING_HEIGHT
        slip = feet_vel[contact]
        raw = {
            "lin_vel_tracking": math.exp(-v_err / 0.25),
            "ang_vel_tracking": math.exp(-wz_err / 0.25),
            "alive": 1.0,
            "contact": float(np.count_nonzero(contact == stance)),
            "lin_vel_z": float(body_linvel[2]) ** 2,
            "ang_vel_xy": float(body_angvel[0]) ** 2 + float(body_angvel[1]) ** 2,
            "orientation": float(gravity[0]) ** 2 + float(gravity[1]) ** 2,
            "base_height": (height - g1.CROUCH_BASE_HEIGHT) ** 2,
            "dof_acc": float(acc @ acc),
            "dof_vel": float(legs_dq @ legs_dq),
            "action_rate": action_rate,
            "hip_pos": float(hips @ hips),
            "contact_no_vel": float(np.vdot(slip, slip)),
            "feet_swing_height": float(swing[~contact] @ swing[~contact]),
            "upper_posture": float(upper @ upper),
        }
        self.prev = GaitState(legs_dq, feet)
        return {k: self.weights[k] * v for k, v in raw.items()}
