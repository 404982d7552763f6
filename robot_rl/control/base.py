"""The controller contract: state in, actuator commands out, at every physics/control tick.

The same object runs in simulation (the env calls :meth:`Controller.compute` between
``mj_step1`` and ``mj_step2``) and on hardware (a ROS node calls it from its control loop), so
it takes measured state and wall/sim time only, never a simulator handle or a ROS message.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from robot_rl.core.spaces import SpecError


@dataclass
class RobotState:
    """Measured robot state at one tick (joint arrays in embodiment joint order)."""

    q: np.ndarray
    """Joint positions [rad or m], float64, shape (n_joints,)."""
    dq: np.ndarray
    """Joint velocities [rad/s or m/s], float64, shape (n_joints,)."""
    stamp: float = 0.0
    """Time of the measurement [s] (sim time or monotonic wall time)."""
    base_pos: np.ndarray | None = None
    """Floating base position in the world frame [m], shape (3,) (humanoid, quadrotor)."""
    base_quat: np.ndarray | None = None
    """Floating base orientation as a unit quaternion (w, x, y, z), shape (4,)."""
    base_linvel: np.ndarray | None = None
    """Floating base linear velocity in the world frame [m/s], shape (3,)."""
    base_angvel: np.ndarray | None = None
    """Floating base angular velocity in the BODY frame [rad/s], shape (3,) (as MuJoCo's free joint qvel and an IMU gyro give it)."""  # noqa: E501

    def __post_init__(self) -> None:
        self.q = np.asarray(self.q, dtype=np.float64)
        self.dq = np.asarray(self.dq, dtype=np.float64)
        if self.q.ndim != 1 or self.q.shape != self.dq.shape:
            raise SpecError(f"RobotState: q {self.q.shape} and dq {self.dq.shape} must be equal 1-D shapes")
        for name, size in (("base_pos", 3), ("base_quat", 4), ("base_linvel", 3), ("base_angvel", 3)):
            value = getattr(self, name)
            if value is not None:
                arr = np.asarray(value, dtype=np.float64)
                if arr.shape != (size,):
                    raise SpecError(f"RobotState.{name}: expected shape ({size},), got {arr.shape}")
                setattr(self, name, arr)

    def is_finite(self) -> bool:
        """Whether every present field is finite (a NaN from a sensor must not reach the torques)."""
        arrays = [self.q, self.dq, self.base_pos, self.base_quat, self.base_linvel, self.base_angvel]
        return bool(np.isfinite(self.stamp)) and all(a is None or bool(np.all(np.isfinite(a))) for a in arrays)


class TargetRejected(ValueError):
    """A target was refused (NaN/inf, wrong shape, out of limits); the message says why.

    The controller keeps its previous target when this is raised, so the robot keeps holding.
    """


class Controller(abc.ABC):
    """A low-level control law: ``compute(state, stamp)`` -> actuator commands.

    Lifecycle: :meth:`reset` with the current state (hold the current posture, forget targets),
    then any number of :meth:`set_target` (from a policy, 10–50 Hz) and :meth:`compute`
    (every control tick, 500–1000 Hz). ``compute`` returns the values to write into the robot's
    actuators (``data.ctrl`` in MuJoCo): joint torques for arms and humanoids, per-rotor commands
    for quadrotors.
    """

    @property
    @abc.abstractmethod
    def n_commands(self) -> int:
        """Length of the array :meth:`compute` returns."""

    @abc.abstractmethod
    def reset(self, state: RobotState) -> None:
        """Hold the posture in ``state`` and forget every target and filter memory."""

    @abc.abstractmethod
    def set_target(self, target: object, stamp: float) -> None:
        """Accept a new target (the type depends on the controller).

        Raises:
            TargetRejected: the target is malformed or out of limits; the previous one stays.
        """

    @abc.abstractmethod
    def compute(self, state: RobotState, stamp: float) -> np.ndarray:
        """Actuator commands for this tick, float64 of shape ``(n_commands,)``."""

    def warm_up(self, state: RobotState) -> None:
        """Run the law once on ``state`` and forget it, so the first real tick is not the slow one.

        numba loads a compiled law's machine code on its first call (~0.5-0.7 s here, even from the disk
        cache); a vehicle or arm whose first command arrives that late trips its own link watchdog. Drivers
        and emulators call this once before they serve; it ends in :meth:`reset` (holding ``state``).
        """
        self.reset(state)
        self.compute(state, state.stamp)
        self.reset(state)

    def hold(self, state: RobotState) -> None:
        """Switch to holding the posture in ``state`` (used by the safety layer); defaults to :meth:`reset`."""
        self.reset(state)

    def current_target(self) -> object | None:
        """The target being tracked now (the safety layer blends from it when a new policy takes over)."""
        return None

    def safe_stop(self, state: RobotState) -> np.ndarray:
        """Commands for the e-stop state; the default is all zeros (torque off / motors off).

        Arms and humanoids override it with a damping mode (``-kd dq``, plus gravity compensation
        where the controller has a model) so a stopped robot sinks slowly instead of falling.
        """
        return np.zeros(self.n_commands)
