"""Low-level control laws (pure numpy + MuJoCo model quantities, no rclpy) and the safety layer."""

from robot_rl.control.base import Controller, RobotState, TargetRejected

__all__ = ["Controller", "RobotState", "TargetRejected"]
