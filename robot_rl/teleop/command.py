"""What a human operator asks for, independent of the device: a twist, a gripper, buttons.

Every device reader turns its raw input into :class:`TeleopCommand`; :class:`TeleopState` folds a
stream of commands into what the rest of the stack needs: whether the human is in control (the
intervention flag), episode events, and the human's command in the :class:`TeleopMode` of the robot:

* ``end_effector`` (arms): an end-effector pose integrated from the twist, plus the gripper target;
* ``base_velocity`` (humanoids): a planar velocity command (vx, vy, yaw rate) in the heading frame, the
  ``command`` a walking policy observes (as in legged_gym / MuJoCo Playground velocity tracking); each
  direction of a stick scales to its own limit, so full deflection always means that limit;
* ``quad_position`` (quadrotors): a position + yaw setpoint in the world frame, integrated from the twist
  starting at the measured pose and kept inside a workspace box;
* ``quad_velocity`` (quadrotors): a world-frame velocity (vx, vy, vz) and yaw rate setpoint.

Position modes start integrating from the robot's measured pose (:meth:`TeleopState.sync`), so taking
over never makes the target jump.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from robot_rl.control.config import workspace_box
from robot_rl.core.spaces import SpecError
from robot_rl.robots import cf2x


class EpisodeEvent(str, enum.Enum):
    """Episode-level events a human can signal."""

    SUCCESS = "success"
    FAILURE = "failure"
    RERECORD = "rerecord"
    STOP = "stop"


class TeleopMode(str, enum.Enum):
    """What the human's twist commands."""

    END_EFFECTOR = "end_effector"
    BASE_VELOCITY = "base_velocity"
    QUAD_POSITION = "quad_position"
    QUAD_VELOCITY = "quad_velocity"

    @property
    def integrates_pose(self) -> bool:
        """Whether the mode integrates a pose target (it then needs the measured pose to take over)."""
        return self in (TeleopMode.END_EFFECTOR, TeleopMode.QUAD_POSITION)


BASE_VELOCITY_LOW = (-0.3, -0.3, -0.6)
BASE_VELOCITY_HIGH = (0.8, 0.3, 0.6)
"""Default base-velocity range (vx, vy [m/s], yaw rate [rad/s]): HumanoidWalk's command range, so a walking
policy is never commanded outside what it was trained on."""
QUAD_WORKSPACE_LOW: tuple[float, float, float] = workspace_box(cf2x.NAME).low
QUAD_WORKSPACE_HIGH: tuple[float, float, float] = workspace_box(cf2x.NAME).high
"""Default quadrotor workspace [m] (the safety layer's box in controllers/cf2x.yaml)."""


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


def _vector(value: object, name: str) -> np.ndarray:
    v = np.asarray(value, dtype=np.float64)
    if v.shape != (3,) or not np.all(np.isfinite(v)):
        raise SpecError(f"TeleopState.{name}: expected 3 finite values, got {v}")
    return v


@dataclass
class TeleopState:
    """Folds device commands into the human's command for one :class:`TeleopMode`; tracks who is in control."""

    max_linear_speed: float = 0.15
    """m/s at full deflection (end_effector, quad_position, quad_velocity)."""
    max_angular_speed: float = 0.6
    """rad/s at full deflection (end_effector, quad_position, quad_velocity)."""
    intervening: bool = False
    """The human is in control."""
    gripper: float = 1.0
    """Current gripper target."""
    position: np.ndarray | None = None
    """Integrated target position; None until synced from the robot (position modes)."""
    rotvec: np.ndarray | None = None
    """Integrated target orientation as a rotation vector (axis * angle); yaw only in quad_position."""
    mode: TeleopMode = TeleopMode.END_EFFECTOR
    """What the twist commands."""
    velocity_low: tuple[float, ...] = BASE_VELOCITY_LOW
    """base_velocity: (vx, vy, yaw rate) at full negative deflection."""
    velocity_high: tuple[float, ...] = BASE_VELOCITY_HIGH
    """base_velocity: (vx, vy, yaw rate) at full positive deflection."""
    workspace_low: tuple[float, ...] = QUAD_WORKSPACE_LOW
    """quad_position: lower corner of the box the setpoint stays in [m, world frame]."""
    workspace_high: tuple[float, ...] = QUAD_WORKSPACE_HIGH
    """quad_position: upper corner [m, world frame]."""
    linear_velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Velocity modes: the commanded linear velocity (base_velocity: vx, vy, 0 in the heading frame;
    quad_velocity: world frame) [m/s]; zero while the policy is in control."""
    angular_velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Velocity modes: the commanded angular velocity (only z, the yaw rate, is used) [rad/s]."""

    def __post_init__(self) -> None:
        self.mode = TeleopMode(self.mode)
        low, high = _vector(self.velocity_low, "velocity_low"), _vector(self.velocity_high, "velocity_high")
        if np.any(low > 0) or np.any(high < 0):
            raise SpecError(f"TeleopState: velocity range must contain zero, got {low} .. {high}")
        ws_low, ws_high = _vector(self.workspace_low, "workspace_low"), _vector(self.workspace_high, "workspace_high")
        if np.any(ws_low >= ws_high):
            raise SpecError(f"TeleopState: empty workspace {ws_low} .. {ws_high}")
        if not (self.max_linear_speed >= 0 and self.max_angular_speed >= 0):
            raise SpecError("TeleopState: speeds must be non-negative")

    def sync(self, position: np.ndarray, rotvec: np.ndarray) -> None:
        """Start integrating from the robot's current pose (call when the human takes over).

        In quad_position only the heading of ``rotvec`` is kept: a flight setpoint is a position and a yaw.
        """
        self.position = np.asarray(position, dtype=np.float64).copy()
        rotvec = np.asarray(rotvec, dtype=np.float64).copy()
        if self.mode == TeleopMode.QUAD_POSITION:
            from scipy.spatial.transform import Rotation  # here: scipy.spatial is ~0.3 s of every node's start-up

            yaw = Rotation.from_rotvec(rotvec).as_euler("ZYX")[0]
            rotvec = np.array([0.0, 0.0, yaw])
        self.rotvec = rotvec

    def apply(self, cmd: TeleopCommand, dt: float) -> list[EpisodeEvent]:
        """Fold one command in; returns its episode events. Motion integrates only while intervening."""
        if cmd.intervention_hold is not None:
            self.intervening = cmd.intervention_hold
        elif cmd.intervention_toggle:
            self.intervening = not self.intervening
        if cmd.gripper is not None:
            self.gripper = cmd.gripper
        self.linear_velocity, self.angular_velocity = np.zeros(3), np.zeros(3)
        if not self.intervening:
            return list(cmd.events)
        if self.mode == TeleopMode.BASE_VELOCITY:
            stick = np.array([cmd.linear[0], cmd.linear[1], cmd.angular[2]])
            v = np.where(stick >= 0, stick * np.asarray(self.velocity_high), -stick * np.asarray(self.velocity_low))
            self.linear_velocity = np.array([v[0], v[1], 0.0])
            self.angular_velocity = np.array([0.0, 0.0, v[2]])
        elif self.mode == TeleopMode.QUAD_VELOCITY:
            self.linear_velocity = cmd.linear * self.max_linear_speed
            self.angular_velocity = np.array([0.0, 0.0, cmd.angular[2] * self.max_angular_speed])
        elif self.position is not None and self.rotvec is not None:
            step = cmd.linear * self.max_linear_speed * dt
            if self.mode == TeleopMode.QUAD_POSITION:
                self.position = self._in_workspace(self.position, self.position + step)
                yaw = float(self.rotvec[2]) + cmd.angular[2] * self.max_angular_speed * dt
                self.rotvec = np.array([0.0, 0.0, (yaw + np.pi) % (2 * np.pi) - np.pi])
            else:
                from scipy.spatial.transform import Rotation

                self.position = self.position + step
                delta = Rotation.from_rotvec(cmd.angular * self.max_angular_speed * dt)  # world-frame rotation
                self.rotvec = (delta * Rotation.from_rotvec(self.rotvec)).as_rotvec()
        return list(cmd.events)

    def _in_workspace(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """Clip into the box; a setpoint synced outside it may only move back in (no jump on takeover)."""
        low, high = np.asarray(self.workspace_low), np.asarray(self.workspace_high)
        return np.clip(new, np.minimum(low, old), np.maximum(high, old))

    def pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The integrated target (position, quaternion w x y z), or None before :meth:`sync`."""
        if self.position is None or self.rotvec is None:
            return None
        from scipy.spatial.transform import Rotation

        return self.position.copy(), Rotation.from_rotvec(self.rotvec).as_quat(scalar_first=True)

    def base_command(self) -> np.ndarray:
        """base_velocity: the walking command (vx, vy, yaw rate), as HumanoidWalk observes ``command``."""
        return np.array([self.linear_velocity[0], self.linear_velocity[1], self.angular_velocity[2]])
