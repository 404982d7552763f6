"""Teleoperation devices in the pure core: keyboard, gamepad and spacemouse -> TeleopCommand."""

from robot_rl.teleop.command import EpisodeEvent, TeleopCommand, TeleopState

__all__ = ["EpisodeEvent", "TeleopCommand", "TeleopState"]
