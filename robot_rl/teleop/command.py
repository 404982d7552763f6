"""What a human operator asks for, independent of the device: a twist, a gripper, buttons.

Every device reader turns its raw input into :class:`TeleopCommand`; :class:`TeleopState` folds a
stream of commands into what the rest of the stack needs: whether the human is in control (the
intervention flag), the integrated end-effector target, the gripper target, and episode events.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from robot_rl.core.spaces import SpecError


class EpisodeEvent(str, enum.Enum):
    """Episode-level events a human can signal."""

    SUCCESS = "success"
    FAILURE = "failure"
    RERECORD = "rerecord"
    STOP = "stop"


@dataclass(frozen=True, eq=False)
class TeleopCommand:
    """One reading of a teleop device."""

    linear: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Linear velocity command in [-1, 1] per axis (scaled to m/s by TeleopState)."""
    angular: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Angular velocity command in [-1, 1] per axis (scaled to rad/s by TeleopState)."""
    gripper: float | None = None
    """Absolute gripper target in [0 closed, 1 open], or None to keep the last one."""
    intervention_toggle: bool = False
    """The intervention button was pressed (toggles human control)."""
    intervention_hold: bool | None = None
    """For hold-to-intervene devices: True while held; None when the device has no such button."""
    events: tuple[EpisodeEvent, ...] = ()
    """Episode events signalled by this reading."""

    def __post_init__(self) -> None:
        for name in ("linear", "angular"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (3,) or not np.all(np.isfinite(value)):
                raise SpecError(f"TeleopCommand.{name}: expected 3 finite values, got {value}")
            object.__setattr__(self, name, np.clip(value, -1.0, 1.0))
        if self.gripper is not None and not (np.isfinite(self.gripper) and 0.0 <= self.gripper <= 1.0):
            raise SpecError(f"TeleopCommand.gripper: expected a value in [0, 1], got {self.gripper}")


@dataclass
class TeleopState:
    """Integrates commands into an end-effector target and tracks who is in control."""

    max_linear_speed: float = 0.15
    """m/s at full deflection."""
    max_angular_speed: float = 0.6
    """rad/s at full deflection."""
    intervening: bool = False
    """The human is in control."""
    gripper: float = 1.0
    """Current gripper target."""
    position: np.ndarray | None = None
    """End-effector target position; None until synced from the robot."""
    rotvec: np.ndarray | None = None
    """End-effector target orientation as a rotation vector (axis * angle)."""

    def sync(self, position: np.ndarray, rotvec: np.ndarray) -> None:
        """Start integrating from the robot's current pose (call when the human takes over)."""
        self.position = np.asarray(position, dtype=np.float64).copy()
        self.rotvec = np.asarray(rotvec, dtype=np.float64).copy()

    def apply(self, cmd: TeleopCommand, dt: float) -> list[EpisodeEvent]:
        """Fold one command in; returns its episode events. Motion integrates only while intervening."""
        if cmd.intervention_hold is not None:
            self.intervening = cmd.intervention_hold
        elif cmd.intervention_toggle:
            self.intervening = not self.intervening
        if cmd.gripper is not None:
            self.gripper = cmd.gripper
        if self.intervening and self.position is not None and self.rotvec is not None:
            self.position = self.position + cmd.linear * self.max_linear_speed * dt
            delta = Rotation.from_rotvec(cmd.angular * self.max_angular_speed * dt)  # world-frame rotation
            self.rotvec = (delta * Rotation.from_rotvec(self.rotvec)).as_rotvec()
        return list(cmd.events)
