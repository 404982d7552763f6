"""Bitcraze Crazyflie 2.x (``cf2x_L250`` from the ``drone-models`` package) with a free joint.

The package model has 8 ``<motor>`` actuators on the rotor sites: 4 thrusts along body z [N] and
4 yaw reaction torques [Nm]. Each rotor's yaw torque is ``YAW_TORQUE_SIGNS[i] * THRUST_TO_TORQUE *
thrust[i]``; whoever writes ctrl (the quadrotor controller, or the env's motor model) keeps that
relation. Thrust ctrlranges are set here to the real motor limits.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.core import ControlMode, Embodiment, JointLimits, Rates
from robot_rl.robots.assets import robot_model_path

NAME = "cf2x"

BODY = "drone"
FREE_JOINT = "free"
"""Free joint added by :func:`build_spec`."""
COM_SITE = "CoM"
ROTOR_SITES = ("motor0", "motor1", "motor2", "motor3")
THRUST_ACTUATORS = ("motor0_force", "motor1_force", "motor2_force", "motor3_force")
YAW_TORQUE_ACTUATORS = ("motor0_torque", "motor1_torque", "motor2_torque", "motor3_torque")

QPOS_BASE_POS = slice(0, 3)
QPOS_BASE_QUAT = slice(3, 7)
"""Orientation quaternion, w x y z."""
QVEL_BASE_LINVEL = slice(0, 3)
"""Linear velocity, world frame."""
QVEL_BASE_ANGVEL = slice(3, 6)
"""Angular velocity (body rates), body frame."""
CTRL_THRUST = slice(0, 4)
CTRL_YAW_TORQUE = slice(4, 8)
N_QPOS = 7
N_CTRL = 8

MASS = 0.027
"""Mass of the MJCF body [kg] (the package's params.toml says 0.0319 for a loaded L250)."""
INERTIA = (2.3951e-5, 2.3951e-5, 3.2347e-5)
"""Diagonal inertia of the MJCF body [kg m^2]."""
ROTOR_POSITIONS = np.array(
    [[0.0325, -0.0325, 0.0], [-0.0325, -0.0325, 0.0], [-0.0325, 0.0325, 0.0], [0.0325, 0.0325, 0.0]])
"""Rotor positions in the body frame [m] (x forward, y left, z up)."""
ARM_LENGTH = float(np.hypot(0.0325, 0.0325))
THRUST_MIN = 0.0
"""Lowest thrust per rotor [N] (motors may stop)."""
THRUST_MAX = 0.12
"""Highest thrust per rotor [N] (drone-models params.toml)."""
THRUST_TO_TORQUE = 0.007350862856566459
"""Yaw reaction torque per unit thrust [Nm/N] (drone-models params.toml)."""
YAW_TORQUE_SIGNS = np.array([-1.0, 1.0, -1.0, 1.0])
"""Sign of each rotor's reaction torque about body z (drone-models mixing matrix, yaw row)."""
MOTOR_TIME_CONSTANT = 1.0 / 6.8932095506763345
"""First-order thrust dynamics time constant [s] (drone-models ``thrust_dyn_coef``)."""
GRAVITY = 9.81
HOVER_THRUST = MASS * GRAVITY / 4.0
"""Per-rotor thrust that balances gravity [N]."""

EMBODIMENT = Embodiment(
    name=NAME,
    kind="quadrotor",
    joint_names=(),
    limits=JointLimits((), (), (), ()),
    control_modes=(ControlMode.MOTOR_COMMANDS, ControlMode.THRUST_BODY_RATES),
    rates=Rates(control_hz=500.0, policy_hz=50.0, state_publish_hz=100.0),
    base_frame="world",
)


_YAW_COEF = YAW_TORQUE_SIGNS * THRUST_TO_TORQUE


def rest_action(mode: ControlMode) -> np.ndarray:
    """The normalised action that holds a level Crazyflie still: hover thrust, no body rates."""
    frac = HOVER_THRUST / THRUST_MAX
    return np.full(4, frac) if mode == ControlMode.MOTOR_COMMANDS else np.array([frac, 0.0, 0.0, 0.0])


def clip_action(mode: ControlMode, action: np.ndarray) -> np.ndarray:
    """A normalised action clipped to its range (motors and collective in [0, 1], body rates in [-1, 1])."""
    a = np.asarray(action, dtype=np.float64)
    if mode == ControlMode.MOTOR_COMMANDS:
        return np.clip(a, 0.0, 1.0)
    return np.r_[np.clip(a[:1], 0.0, 1.0), np.clip(a[1:], -1.0, 1.0)]


def mixer_matrix() -> np.ndarray:
    """4x4 matrix mapping per-rotor thrusts to (collective thrust, roll, pitch, yaw torques)."""
    x, y = ROTOR_POSITIONS[:, 0], ROTOR_POSITIONS[:, 1]
    return np.stack([np.ones(4), y, -x, YAW_TORQUE_SIGNS * THRUST_TO_TORQUE])


def rotor_commands(thrusts: np.ndarray) -> np.ndarray:
    """The 8 ctrl values (4 thrusts, 4 yaw torques) for per-rotor thrusts [N], clipped to limits."""
    t = np.minimum(np.maximum(np.asarray(thrusts, dtype=np.float64), THRUST_MIN), THRUST_MAX)
    return np.concatenate((t, _YAW_COEF * t))


def build_spec() -> mujoco.MjSpec:
    """The Crazyflie as an MjSpec with a free joint and thrust limits (no floor: scenes add it)."""
    spec = mujoco.MjSpec.from_file(str(robot_model_path(NAME)))
    spec.body(BODY).add_freejoint(name=FREE_JOINT)
    for name in THRUST_ACTUATORS:
        act = spec.actuator(name)
        act.ctrllimited = True
        act.ctrlrange = np.array([THRUST_MIN, THRUST_MAX])
    for name in YAW_TORQUE_ACTUATORS:
        act = spec.actuator(name)
        act.ctrllimited = True
        act.ctrlrange = np.array([-1.0, 1.0]) * THRUST_MAX * THRUST_TO_TORQUE
    return spec


def load_model(timestep: float | None = None) -> mujoco.MjModel:
    """Compile :func:`build_spec`; ``timestep`` overrides the physics step [s] (default 0.002)."""
    spec = build_spec()
    if timestep is not None:
        spec.option.timestep = float(timestep)
    return spec.compile()
