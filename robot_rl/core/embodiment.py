"""Embodiment description: what a robot is, to every other part of robot_rl.

Joint names, limits, the control modes it accepts and the rates it runs at. Controllers, safety
checks, ROS message adapters and dataset metadata all read it, so one robot is described once
(``controllers/<robot>.yaml`` holds the gains; this holds what the hardware is).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.spaces import SpecError


class ControlMode(str, enum.Enum):
    """How an action is turned into actuator commands."""

    JOINT_POSITION = "joint_position"
    """Joint position targets tracked by a joint PD / impedance loop."""
    JOINT_IMPEDANCE = "joint_impedance"
    """Joint position + velocity + feed-forward torque targets with per-joint kp/kd (Unitree low-level)."""
    JOINT_TORQUE = "joint_torque"
    """Raw joint torques (after safety limits)."""
    CARTESIAN_DELTA = "cartesian_delta"
    """End-effector delta pose (dx, dy, dz, droll, dpitch, dyaw) + gripper, tracked by Cartesian impedance."""
    CARTESIAN_POSE = "cartesian_pose"
    """Absolute end-effector pose target (CRISP ``target_pose``)."""
    MOTOR_COMMANDS = "motor_commands"
    """Normalised per-motor commands in [0, 1] (quadrotor)."""
    THRUST_BODY_RATES = "thrust_body_rates"
    """Collective thrust + body rates (quadrotor, as PX4/Betaflight accept)."""


@dataclass(frozen=True)
class JointLimits:
    """Per-joint limits, in the order of :attr:`Embodiment.joint_names`."""

    position_lower: tuple[float, ...]
    """Lower position limits [rad or m]."""
    position_upper: tuple[float, ...]
    """Upper position limits [rad or m]."""
    velocity: tuple[float, ...]
    """Absolute velocity limits [rad/s or m/s]."""
    effort: tuple[float, ...]
    """Absolute torque/force limits [Nm or N]."""

    def __post_init__(self) -> None:
        n = len(self.position_lower)
        for name in ("position_upper", "velocity", "effort"):
            if len(getattr(self, name)) != n:
                raise SpecError(f"JointLimits.{name}: expected {n} values, got {len(getattr(self, name))}")
        for name in ("position_lower", "position_upper", "velocity", "effort"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            if np.any(np.isnan(values)):
                raise SpecError(f"JointLimits.{name}: contains NaN")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        lo, hi = np.asarray(self.position_lower), np.asarray(self.position_upper)
        if np.any(lo >= hi):
            bad = np.flatnonzero(lo >= hi).tolist()
            raise SpecError(f"JointLimits: position_lower >= position_upper at joints {bad}")
        if np.any(np.asarray(self.velocity) <= 0) or np.any(np.asarray(self.effort) <= 0):
            raise SpecError("JointLimits: velocity and effort limits must be positive")

    @property
    def n(self) -> int:
        """Number of joints."""
        return len(self.position_lower)

    def clip_position(self, q: np.ndarray) -> np.ndarray:
        """Clip joint positions into the position limits."""
        return np.clip(q, self.position_lower, self.position_upper)

    def within(self, q: np.ndarray, margin: float = 0.0) -> np.ndarray:
        """Per joint, whether ``q`` lies inside the limits shrunk by ``margin``."""
        lo, hi = np.asarray(self.position_lower), np.asarray(self.position_upper)
        return (q >= lo + margin) & (q <= hi - margin)


@dataclass(frozen=True)
class Rates:
    """The loop rates of one robot, in Hz."""

    control_hz: float = 1000.0
    """Low-level controller (and, in simulation, physics) rate."""
    policy_hz: float = 20.0
    """Rate at which the policy emits actions (or action chunks are consumed)."""
    state_publish_hz: float = 100.0
    """Rate at which joint states are published to ROS."""

    def __post_init__(self) -> None:
        for name in ("control_hz", "policy_hz", "state_publish_hz"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise SpecError(f"Rates.{name}: must be a positive finite rate, got {value}")
        if self.policy_hz > self.control_hz:
            raise SpecError(f"Rates: policy_hz ({self.policy_hz}) exceeds control_hz ({self.control_hz})")

    @property
    def control_steps_per_policy_step(self) -> int:
        """Controller ticks between two policy actions (rounded to the nearest integer)."""
        return max(1, round(self.control_hz / self.policy_hz))


@dataclass(frozen=True)
class Embodiment:
    """A robot as the rest of robot_rl sees it."""

    name: str
    """Robot identifier, e.g. ``panda``, ``g1``, ``cf2x``."""
    kind: str
    """One of ``arm``, ``humanoid``, ``quadrotor``, ``mobile``."""
    joint_names: tuple[str, ...]
    """Actuated joints in the order every joint array uses (ROS JointState may use another order)."""
    limits: JointLimits
    """Per-joint limits in :attr:`joint_names` order."""
    control_modes: tuple[ControlMode, ...]
    """Control modes this robot accepts; the first is the default."""
    rates: Rates = field(default_factory=Rates)
    """Loop rates."""
    base_frame: str = "base"
    """Frame in which Cartesian targets are expressed."""
    end_effector_frame: str | None = None
    """End-effector frame name (arms)."""
    gripper_joints: tuple[str, ...] = ()
    """Gripper joints (not part of :attr:`joint_names`)."""

    KINDS = ("arm", "humanoid", "quadrotor", "mobile")

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("Embodiment.name: must not be empty")
        if self.kind not in self.KINDS:
            raise SpecError(f"Embodiment.kind: expected one of {self.KINDS}, got {self.kind!r}")
        object.__setattr__(self, "joint_names", tuple(self.joint_names))
        object.__setattr__(self, "gripper_joints", tuple(self.gripper_joints))
        if len(set(self.joint_names)) != len(self.joint_names):
            raise SpecError(f"Embodiment.joint_names: duplicates in {self.joint_names}")
        if self.limits.n != len(self.joint_names):
            raise SpecError(
                f"Embodiment.limits: {self.limits.n} joints of limits for {len(self.joint_names)} joint names"
            )
        modes = tuple(ControlMode(m) for m in self.control_modes)
        if not modes:
            raise SpecError("Embodiment.control_modes: at least one control mode is needed")
        object.__setattr__(self, "control_modes", modes)

    @property
    def n_joints(self) -> int:
        """Number of actuated joints (without gripper joints)."""
        return len(self.joint_names)

    @property
    def default_control_mode(self) -> ControlMode:
        """The first listed control mode."""
        return self.control_modes[0]

    def joint_index(self, names: Sequence[str]) -> np.ndarray:
        """Indices into :attr:`joint_names` of ``names`` (e.g. a ROS JointState's order).

        Raises:
            SpecError: listing the names this robot does not have.
        """
        lookup = {n: i for i, n in enumerate(self.joint_names)}
        unknown = [n for n in names if n not in lookup]
        if unknown:
            raise SpecError(f"unknown joint names {unknown} for robot {self.name!r}")
        return np.array([lookup[n] for n in names], dtype=np.intp)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Embodiment:
        """Build from a plain dict (as loaded from YAML)."""
        data = dict(data)
        limits = data.pop("limits")
        rates = data.pop("rates", {})
        return cls(
            limits=JointLimits(**limits),
            rates=Rates(**rates),
            joint_names=tuple(data.pop("joint_names")),
            control_modes=tuple(ControlMode(m) for m in data.pop("control_modes")),
            **data,
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain dict that :meth:`from_dict` reads back (for dataset metadata and YAML)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "joint_names": list(self.joint_names),
            "limits": {
                "position_lower": list(self.limits.position_lower),
                "position_upper": list(self.limits.position_upper),
                "velocity": list(self.limits.velocity),
                "effort": list(self.limits.effort),
            },
            "control_modes": [m.value for m in self.control_modes],
            "rates": {
                "control_hz": self.rates.control_hz,
                "policy_hz": self.rates.policy_hz,
                "state_publish_hz": self.rates.state_publish_hz,
            },
            "base_frame": self.base_frame,
            "end_effector_frame": self.end_effector_frame,
            "gripper_joints": list(self.gripper_joints),
        }
