"""Controller targets, mirroring CRISP's command topics without any ROS types.

``target_pose`` -> :class:`PoseTarget`, ``target_joint`` -> :class:`JointTarget`,
``target_wrench`` -> :class:`WrenchTarget`, ``target_stiffness`` -> :class:`StiffnessTarget`; the
quadrotor takes :class:`FlightTarget` or :class:`BodyRateTarget`. Message conversion lives in
``robot_rl.ros``; here every target checks its own shapes and finiteness so a bad one is refused
before it reaches a torque.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.control.base import TargetRejected
from robot_rl.control.rotations import quat_normalize, quat_slerp


def as_vector(name: str, value: object, size: int | None) -> np.ndarray:
    """``value`` as a finite float64 vector of ``size`` elements, else :class:`TargetRejected` naming it."""
    try:
        arr = np.array(value, dtype=np.float64).reshape(-1) if value is not None else None
    except (TypeError, ValueError) as exc:
        raise TargetRejected(f"{name}: not a numeric vector ({exc})") from exc
    if arr is None:
        raise TargetRejected(f"{name}: missing")
    if size is not None and arr.shape != (size,):
        raise TargetRejected(f"{name}: expected {size} values, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise TargetRejected(f"{name}: contains NaN or inf")
    return arr


@dataclass
class PoseTarget:
    """End-effector pose in the base frame (CRISP ``target_pose``)."""

    position: np.ndarray
    """Position [m], shape (3,)."""
    quat: np.ndarray
    """Orientation, unit quaternion (w, x, y, z), shape (4,); normalised on construction."""
    twist: np.ndarray | None = None
    """Velocity feed-forward (vx, vy, vz [m/s], wx, wy, wz [rad/s], base frame); None means zero.
    Damping then acts on the velocity error, so a moving reference is followed without drag."""

    def __post_init__(self) -> None:
        self.position = as_vector("PoseTarget.position", self.position, 3)
        q = as_vector("PoseTarget.quat", self.quat, 4)
        if not 0.5 < np.linalg.norm(q) < 2.0:
            raise TargetRejected(f"PoseTarget.quat: norm {np.linalg.norm(q):.3g} is not near 1")
        self.quat = quat_normalize(q)
        if self.twist is not None:
            self.twist = as_vector("PoseTarget.twist", self.twist, 6)

    def blend(self, other: PoseTarget, alpha: float) -> PoseTarget:
        """``alpha`` of the way from self to ``other`` (lerp position, slerp rotation, scaled twist)."""
        twist = None if other.twist is None else alpha * other.twist
        return PoseTarget(self.position + alpha * (other.position - self.position),
                          quat_slerp(self.quat, other.quat, alpha), twist)


@dataclass
class JointTarget:
    """Joint-space target (CRISP ``target_joint``; Unitree LowCmd when kp/kd are given)."""

    q: np.ndarray
    """Joint positions [rad], embodiment order."""
    dq: np.ndarray | None = None
    """Joint velocities [rad/s]; None means zero."""
    tau_ff: np.ndarray | None = None
    """Feed-forward torques [Nm]; None means zero."""
    kp: np.ndarray | None = None
    """Per-joint stiffness [Nm/rad] overriding the configured one; None keeps the config."""
    kd: np.ndarray | None = None
    """Per-joint damping [Nm s/rad] overriding the configured one; None keeps the config."""

    def __post_init__(self) -> None:
        self.q = as_vector("JointTarget.q", self.q, None)
        n = self.q.size
        for name in ("dq", "tau_ff", "kp", "kd"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, as_vector(f"JointTarget.{name}", value, n))
        for name in ("kp", "kd"):
            value = getattr(self, name)
            if value is not None and np.any(value < 0):
                raise TargetRejected(f"JointTarget.{name}: gains must be >= 0 (negative gains push, not hold)")

    def blend(self, other: JointTarget, alpha: float) -> JointTarget:
        """``alpha`` of the way from self to ``other`` (every field linearly; missing fields as zero/config)."""
        def mix(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            if a is None and b is None:
                return None
            a0 = np.zeros_like(self.q) if a is None else a
            b0 = np.zeros_like(self.q) if b is None else b
            return a0 + alpha * (b0 - a0)
        kp = other.kp if self.kp is None or other.kp is None else mix(self.kp, other.kp)
        kd = other.kd if self.kd is None or other.kd is None else mix(self.kd, other.kd)
        q = self.q + alpha * (other.q - self.q)
        return JointTarget(q, mix(self.dq, other.dq), mix(self.tau_ff, other.tau_ff), kp, kd)


@dataclass
class WrenchTarget:
    """Feed-forward wrench at the end effector, base frame (CRISP ``target_wrench``)."""

    force: np.ndarray
    """Force [N], shape (3,)."""
    torque: np.ndarray
    """Torque [Nm], shape (3,)."""

    def __post_init__(self) -> None:
        self.force = as_vector("WrenchTarget.force", self.force, 3)
        self.torque = as_vector("WrenchTarget.torque", self.torque, 3)


@dataclass
class StiffnessTarget:
    """Cartesian stiffness (CRISP ``target_stiffness``: kx, ky, kz [N/m], krx, kry, krz [Nm/rad])."""

    stiffness: np.ndarray
    """Six stiffness values; clamped by the controller to its configured maximum."""

    def __post_init__(self) -> None:
        self.stiffness = as_vector("StiffnessTarget.stiffness", self.stiffness, 6)
        if np.any(self.stiffness < 0):
            raise TargetRejected("StiffnessTarget.stiffness: values must be >= 0")


@dataclass
class FlightTarget:
    """Quadrotor setpoint: position, optional velocity/acceleration feed-forward and yaw (world frame)."""

    position: np.ndarray
    """Position [m], shape (3,)."""
    yaw: float = 0.0
    """Heading [rad]."""
    velocity: np.ndarray | None = None
    """Velocity feed-forward [m/s]; None means zero."""
    acceleration: np.ndarray | None = None
    """Acceleration feed-forward [m/s^2]; None means zero."""

    def __post_init__(self) -> None:
        self.position = as_vector("FlightTarget.position", self.position, 3)
        self.yaw = float(as_vector("FlightTarget.yaw", self.yaw, 1)[0])
        for name in ("velocity", "acceleration"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, as_vector(f"FlightTarget.{name}", value, 3))

    def blend(self, other: FlightTarget, alpha: float) -> FlightTarget:
        """``alpha`` of the way from self to ``other`` (yaw along the shorter arc)."""
        dyaw = (other.yaw - self.yaw + np.pi) % (2 * np.pi) - np.pi
        vel = None if other.velocity is None else alpha * other.velocity
        acc = None if other.acceleration is None else alpha * other.acceleration
        return FlightTarget(self.position + alpha * (other.position - self.position),
                            self.yaw + alpha * dyaw, vel, acc)


@dataclass
class BodyRateTarget:
    """Quadrotor collective thrust + body rates (what PX4 / Betaflight accept from an offboard policy)."""

    thrust: float
    """Collective thrust of all rotors [N]."""
    rates: np.ndarray
    """Body angular rates (roll, pitch, yaw) [rad/s], body frame, shape (3,)."""

    def __post_init__(self) -> None:
        self.thrust = float(as_vector("BodyRateTarget.thrust", self.thrust, 1)[0])
        if self.thrust < 0:
            raise TargetRejected(f"BodyRateTarget.thrust: must be >= 0, got {self.thrust}")
        self.rates = as_vector("BodyRateTarget.rates", self.rates, 3)

    def blend(self, other: BodyRateTarget, alpha: float) -> BodyRateTarget:
        """``alpha`` of the way from self to ``other``."""
        return BodyRateTarget(self.thrust + alpha * (other.thrust - self.thrust),
                              self.rates + alpha * (other.rates - self.rates))


Target = PoseTarget | JointTarget | WrenchTarget | StiffnessTarget | FlightTarget | BodyRateTarget
"""Any target a controller in robot_rl.control accepts."""
