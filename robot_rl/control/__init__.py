"""Low-level control laws and the safety layer (no rclpy); numba kernels in :mod:`robot_rl.control.kernels`.

Every controller implements :class:`Controller` (``reset`` / ``set_target`` / ``compute`` at each
physics or control tick) and is built per robot from ``controllers/<robot>.yaml`` by
:func:`build_controller`. :class:`Watchdog` and :func:`check_pose_target` are the one staleness and
workspace check every guard uses (safety layer, ROS safety node, target gate); :func:`step_physics` and
:class:`StateIndex` are the one MuJoCo loop and state reader every simulated runtime uses.
"""

from robot_rl.control.arm_model import MujocoArmModel
from robot_rl.control.base import Controller, RobotState, TargetRejected
from robot_rl.control.cartesian import CartesianConfig, CartesianImpedanceController
from robot_rl.control.config import ControlConfig, build_controller, load_control_config
from robot_rl.control.joint_pd import JointPDConfig, JointPDController
from robot_rl.control.quadrotor import (
    MotorModel,
    QuadrotorConfig,
    QuadrotorController,
    QuadrotorParams,
    ThrustCurve,
)
from robot_rl.control.safety import SafetyConfig, SafetyLayer, SafetyMode, SafetyStatus
from robot_rl.control.stepping import StateIndex, step_physics
from robot_rl.control.targets import (
    BodyRateTarget,
    FlightTarget,
    JointTarget,
    PoseTarget,
    StiffnessTarget,
    WrenchTarget,
)
from robot_rl.control.watchdog import Watchdog, WorkspaceBox, check_pose_target

__all__ = [
    "BodyRateTarget",
    "CartesianConfig",
    "CartesianImpedanceController",
    "ControlConfig",
    "Controller",
    "FlightTarget",
    "JointPDConfig",
    "JointPDController",
    "JointTarget",
    "MotorModel",
    "MujocoArmModel",
    "PoseTarget",
    "QuadrotorConfig",
    "QuadrotorController",
    "QuadrotorParams",
    "RobotState",
    "SafetyConfig",
    "SafetyLayer",
    "SafetyMode",
    "SafetyStatus",
    "StateIndex",
    "StiffnessTarget",
    "TargetRejected",
    "ThrustCurve",
    "Watchdog",
    "WorkspaceBox",
    "WrenchTarget",
    "build_controller",
    "check_pose_target",
    "load_control_config",
    "step_physics",
]
