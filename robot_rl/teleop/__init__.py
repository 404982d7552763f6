"""Teleoperation in the pure core: devices -> TeleopCommand -> the human's command for the robot's TeleopMode.

Also the velocity-command mux and the recording rules that every embodiment shares.
"""

from robot_rl.teleop.command import EpisodeEvent, TeleopCommand, TeleopMode, TeleopState

__all__ = ["EpisodeEvent", "TeleopCommand", "TeleopMode", "TeleopState"]
