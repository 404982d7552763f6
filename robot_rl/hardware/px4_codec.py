"""PX4 offboard setpoints on MAVLink 2: frames, flight modes, thrust scaling, checks, encode and decode.

Frames are converted here and nowhere else. ROS uses ENU world / FLU body axes (REP 103, REP 147), PX4
NED world / FRD body axes; the maps are the fixed rotations of PX4's own ROS 2 bridge
(px4_ros_com ``frame_transforms``): a vector swaps x and y and negates z (ENU <-> NED) or negates y and z
(FLU <-> FRD), an orientation is ``R_ned_frd = P R_enu_flu D``, a heading ``yaw_ned = pi/2 - yaw_enu``.

PX4 modes travel in HEARTBEAT.custom_mode as ``main << 16 | sub << 24`` (PX4's ``px4_custom_mode.h``).
PX4 takes thrust normalised to [0, 1] of its motors; :class:`ThrustMap` relates it to Newtons through the
hover throttle (``MPC_THR_HOVER``) linearly, as PX4's own hover-thrust scaling does.

Every setpoint is checked (finite, within :class:`SetpointLimits`) before it is encoded; a refusal is a
:class:`SetpointRefused` carrying the reason. The emulator decodes with the same functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.control.rotations import mat_to_quat, quat_to_mat

MAIN_MODES = {1: "MANUAL", 2: "ALTCTL", 3: "POSCTL", 4: "AUTO", 5: "ACRO", 6: "OFFBOARD", 7: "STABILIZED",
              8: "RATTITUDE"}
"""PX4 custom main modes (``PX4_CUSTOM_MAIN_MODE_*``)."""
AUTO_SUB_MODES = {1: "READY", 2: "TAKEOFF", 3: "LOITER", 4: "MISSION", 5: "RTL", 6: "LAND", 8: "FOLLOW_TARGET",
                  9: "PRECLAND"}
"""PX4 sub modes of AUTO (``PX4_CUSTOM_SUB_MODE_AUTO_*``); AUTO_LOITER is the "Hold" mode."""
MAIN_OFFBOARD, MAIN_AUTO = 6, 4
SUB_LOITER, SUB_LAND = 3, 6
FORCE_MAGIC = 21196.0
"""MAV_CMD_COMPONENT_ARM_DISARM param2 that makes PX4 arm without checks / disarm even in flight."""
AUTOPILOT_COMPONENT = mavlink.MAV_COMP_ID_AUTOPILOT1
IGNORE_ATTITUDE = mavlink.ATTITUDE_TARGET_TYPEMASK_ATTITUDE_IGNORE
_POS_IGNORE = 0b111
_VEL_IGNORE = 0b111 << 3
_ACC_IGNORE = 0b111 << 6
_YAW_IGNORE = 1 << 10
_YAW_RATE_IGNORE = 1 << 11
VELOCITY_MASK = _POS_IGNORE | _ACC_IGNORE | _YAW_IGNORE
"""SET_POSITION_TARGET_LOCAL_NED type_mask of a velocity + yaw-rate setpoint."""
POSITION_MASK = _VEL_IGNORE | _ACC_IGNORE | _YAW_RATE_IGNORE
"""SET_POSITION_TARGET_LOCAL_NED type_mask of a position + yaw setpoint."""


def custom_mode(main: int, sub: int = 0) -> int:
    """HEARTBEAT.custom_mode of a PX4 main/sub mode."""
    return (int(main) << 16) | (int(sub) << 24)


def split_mode(mode: int) -> tuple[int, int]:
    """(main, sub) of a PX4 custom_mode."""
    return (int(mode) >> 16) & 0xFF, (int(mode) >> 24) & 0xFF


def mode_name(mode: int) -> str:
    """Readable PX4 mode: OFFBOARD, AUTO_LOITER (Hold), AUTO_LAND, ... (UNKNOWN_<n> otherwise)."""
    main, sub = split_mode(mode)
    name = MAIN_MODES.get(main, f"UNKNOWN_{main}")
    return f"{name}_{AUTO_SUB_MODES.get(sub, sub)}" if main == MAIN_AUTO else name


OFFBOARD = custom_mode(MAIN_OFFBOARD)
HOLD = custom_mode(MAIN_AUTO, SUB_LOITER)
LAND = custom_mode(MAIN_AUTO, SUB_LAND)


# --- frames --------------------------------------------------------------------------------------------------
_P = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
"""ENU <-> NED (its own inverse)."""
_D = np.diag([1.0, -1.0, -1.0])
"""FLU <-> FRD (its own inverse)."""


def enu_to_ned(v: np.ndarray) -> np.ndarray:
    """A world vector from ENU (ROS) to NED (PX4); the same map goes back."""
    v = np.asarray(v, dtype=np.float64)
    return np.array([v[1], v[0], -v[2]])


ned_to_enu = enu_to_ned


def flu_to_frd(v: np.ndarray) -> np.ndarray:
    """A body vector (rates, accelerations) from FLU (ROS) to FRD (PX4); the same map goes back."""
    v = np.asarray(v, dtype=np.float64)
    return np.array([v[0], -v[1], -v[2]])


frd_to_flu = flu_to_frd


def quat_enu_to_ned(q: np.ndarray) -> np.ndarray:
    """Orientation (w, x, y, z) of an FLU body in ENU -> of its FRD body in NED."""
    return mat_to_quat(_P @ quat_to_mat(np.asarray(q, dtype=np.float64) / np.linalg.norm(q)) @ _D)


quat_ned_to_enu = quat_enu_to_ned  # P and D are their own inverses


def yaw_enu_to_ned(yaw: float) -> float:
    """Heading from ENU (0 = east, counter-clockwise) to NED (0 = north, clockwise), wrapped to [-pi, pi)."""
    return (math.pi / 2 - yaw + math.pi) % (2 * math.pi) - math.pi


yaw_ned_to_enu = yaw_enu_to_ned


# --- thrust --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThrustMap:
    """Collective thrust [N] <-> PX4's normalised thrust, linear through the hover point."""

    hover_thrust: float
    """Normalised thrust that holds the vehicle in hover (PX4 ``MPC_THR_HOVER``), in (0, 1)."""
    mass: float
    """Mass the thrust in Newtons refers to [kg] (the model the policy was trained on)."""
    gravity: float = 9.81
    """[m/s^2]."""

    def __post_init__(self) -> None:
        if not 0 < self.hover_thrust < 1:
            raise ValueError(f"hover_thrust must be in (0, 1), got {self.hover_thrust}")
        if not self.mass > 0:
            raise ValueError(f"mass must be positive, got {self.mass}")

    def normalised(self, thrust: float) -> float:
        """Normalised thrust for ``thrust`` [N] (not clipped)."""
        return float(thrust) / (self.mass * self.gravity) * self.hover_thrust

    def newtons(self, normalised: float) -> float:
        """Thrust [N] for a normalised thrust."""
        return float(normalised) / self.hover_thrust * self.mass * self.gravity


# --- setpoints -----------------------------------------------------------------------------------------------
class SetpointRefused(ValueError):
    """A setpoint that must not reach the vehicle; the message says why."""


@dataclass(frozen=True)
class SetpointLimits:
    """What the bridge lets through to the vehicle (PX4 applies its own limits on top)."""

    max_body_rate: float = 6.0
    """Largest body rate on any axis [rad/s]."""
    max_velocity: float = 3.0
    """Largest speed of a velocity setpoint [m/s]."""
    max_yaw_rate: float = 2.0
    """Largest yaw rate of a velocity setpoint [rad/s]."""
    box_low: tuple[float, float, float] = (-50.0, -50.0, -1.0)
    """Lower corner of the allowed position setpoints, ENU [m] (local frame of the vehicle)."""
    box_high: tuple[float, float, float] = (50.0, 50.0, 30.0)
    """Upper corner of the allowed position setpoints, ENU [m]."""


@dataclass(frozen=True)
class RatesSetpoint:
    """Body rates (FRD) + normalised collective thrust: SET_ATTITUDE_TARGET with the attitude ignored."""

    rates_frd: tuple[float, float, float]
    thrust: float


@dataclass(frozen=True)
class VelocitySetpoint:
    """NED velocity + yaw rate (clockwise): SET_POSITION_TARGET_LOCAL_NED, velocity fields only."""

    velocity_ned: tuple[float, float, float]
    yaw_rate: float


@dataclass(frozen=True)
class PositionSetpoint:
    """NED position + heading: SET_POSITION_TARGET_LOCAL_NED, position fields only."""

    position_ned: tuple[float, float, float]
    yaw: float


Setpoint = RatesSetpoint | VelocitySetpoint | PositionSetpoint


def _finite(name: str, values: np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise SetpointRefused(f"{name} contains NaN or inf: {arr.tolist()}")
    return arr


def _vec3(values: np.ndarray) -> tuple[float, float, float]:
    return float(values[0]), float(values[1]), float(values[2])


def rates_setpoint(rates_flu: np.ndarray, thrust: float, thrust_map: ThrustMap,
                   limits: SetpointLimits) -> RatesSetpoint:
    """Body rates [rad/s, FLU] + collective thrust [N] -> a checked :class:`RatesSetpoint`."""
    rates = _finite("body rates", rates_flu)
    thrust = float(_finite("thrust", np.array([thrust]))[0])
    if np.max(np.abs(rates)) > limits.max_body_rate:
        raise SetpointRefused(f"body rates {np.round(rates, 3).tolist()} exceed {limits.max_body_rate} rad/s")
    normalised = thrust_map.normalised(thrust)
    if not 0.0 <= normalised <= 1.0:
        raise SetpointRefused(f"thrust {thrust:.4g} N is {normalised:.3f} of full thrust, outside [0, 1]")
    return RatesSetpoint(_vec3(flu_to_frd(rates)), normalised)


def velocity_setpoint(velocity_enu: np.ndarray, yaw_rate_enu: float, limits: SetpointLimits) -> VelocitySetpoint:
    """World velocity [m/s, ENU] + yaw rate [rad/s, counter-clockwise] -> a checked :class:`VelocitySetpoint`."""
    v = _finite("velocity", velocity_enu)
    yaw_rate = float(_finite("yaw rate", np.array([yaw_rate_enu]))[0])
    if np.linalg.norm(v) > limits.max_velocity:
        raise SetpointRefused(f"speed {np.linalg.norm(v):.3g} m/s exceeds {limits.max_velocity} m/s")
    if abs(yaw_rate) > limits.max_yaw_rate:
        raise SetpointRefused(f"yaw rate {yaw_rate:.3g} rad/s exceeds {limits.max_yaw_rate} rad/s")
    return VelocitySetpoint(_vec3(enu_to_ned(v)), -yaw_rate)


def position_setpoint(position_enu: np.ndarray, yaw_enu: float, limits: SetpointLimits) -> PositionSetpoint:
    """Position [m, ENU local frame] + heading [rad, ENU] -> a checked :class:`PositionSetpoint`."""
    p = _finite("position", position_enu)
    yaw = float(_finite("yaw", np.array([yaw_enu]))[0])
    if np.any(p < np.asarray(limits.box_low)) or np.any(p > np.asarray(limits.box_high)):
        raise SetpointRefused(f"position {np.round(p, 3).tolist()} is outside the box "
                              f"{list(limits.box_low)} .. {list(limits.box_high)}")
    return PositionSetpoint(_vec3(enu_to_ned(p)), yaw_enu_to_ned(yaw))


def encode_setpoint(mav: mavlink.MAVLink, setpoint: Setpoint, time_boot_ms: int, target_system: int,
                    target_component: int = AUTOPILOT_COMPONENT) -> mavlink.MAVLink_message:
    """The MAVLink message PX4's offboard mode takes for ``setpoint``."""
    t = int(time_boot_ms) & 0xFFFFFFFF
    if isinstance(setpoint, RatesSetpoint):
        return mav.set_attitude_target_encode(t, target_system, target_component, IGNORE_ATTITUDE, [1.0, 0.0, 0.0, 0.0],
                                              *setpoint.rates_frd, setpoint.thrust)
    if isinstance(setpoint, VelocitySetpoint):
        return mav.set_position_target_local_ned_encode(
            t, target_system, target_component, mavlink.MAV_FRAME_LOCAL_NED, VELOCITY_MASK, 0.0, 0.0, 0.0,
            *setpoint.velocity_ned, 0.0, 0.0, 0.0, 0.0, setpoint.yaw_rate)
    return mav.set_position_target_local_ned_encode(
        t, target_system, target_component, mavlink.MAV_FRAME_LOCAL_NED, POSITION_MASK, *setpoint.position_ned,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, setpoint.yaw, 0.0)


def decode_setpoint(msg: mavlink.MAVLink_message) -> Setpoint:
    """The setpoint of a SET_ATTITUDE_TARGET / SET_POSITION_TARGET_LOCAL_NED (the emulator's side).

    Raises:
        SetpointRefused: for another message, another frame, a type_mask combination this codec does not
            produce, or non-finite fields.
    """
    kind = msg.get_type()
    if kind == "SET_ATTITUDE_TARGET":
        if not msg.type_mask & IGNORE_ATTITUDE:
            raise SetpointRefused("SET_ATTITUDE_TARGET: only body rates + thrust (attitude ignored) are emulated")
        rates = _finite("body rates", np.array([msg.body_roll_rate, msg.body_pitch_rate, msg.body_yaw_rate]))
        thrust = float(_finite("thrust", np.array([msg.thrust]))[0])
        if not 0.0 <= thrust <= 1.0:
            raise SetpointRefused(f"SET_ATTITUDE_TARGET: thrust {thrust} outside [0, 1]")
        return RatesSetpoint(_vec3(rates), thrust)
    if kind != "SET_POSITION_TARGET_LOCAL_NED":
        raise SetpointRefused(f"{kind} is not an offboard setpoint")
    if msg.coordinate_frame != mavlink.MAV_FRAME_LOCAL_NED:
        raise SetpointRefused(f"SET_POSITION_TARGET_LOCAL_NED: frame {msg.coordinate_frame} is not LOCAL_NED")
    if msg.type_mask & ~(1 << 9) == VELOCITY_MASK:
        v = _finite("velocity", np.array([msg.vx, msg.vy, msg.vz]))
        return VelocitySetpoint(_vec3(v), float(_finite("yaw rate", np.array([msg.yaw_rate]))[0]))
    if msg.type_mask & ~(1 << 9) == POSITION_MASK:
        p = _finite("position", np.array([msg.x, msg.y, msg.z]))
        return PositionSetpoint(_vec3(p), float(_finite("yaw", np.array([msg.yaw]))[0]))
    raise SetpointRefused(f"SET_POSITION_TARGET_LOCAL_NED: type_mask {msg.type_mask:#x} is not emulated "
                          f"(velocity {VELOCITY_MASK:#x} or position {POSITION_MASK:#x})")


def result_name(result: int) -> str:
    """MAV_RESULT_ACCEPTED, MAV_RESULT_TEMPORARILY_REJECTED, ... for a COMMAND_ACK result."""
    entry = mavlink.enums["MAV_RESULT"].get(int(result))
    return entry.name if entry is not None else f"MAV_RESULT_{result}"


def command_name(command: int) -> str:
    """MAV_CMD_COMPONENT_ARM_DISARM, ... for a command id."""
    entry = mavlink.enums["MAV_CMD"].get(int(command))
    return entry.name if entry is not None else f"MAV_CMD_{command}"


def parse_datagram(mav: mavlink.MAVLink, data: bytes) -> list[mavlink.MAVLink_message]:
    """The valid messages of one UDP datagram (BAD_DATA dropped), the parser left empty afterwards.

    A datagram carries whole frames: pymavlink's stream parser would otherwise keep a truncated frame at
    the end of one datagram and swallow the next datagram's frames (an arm, a disarm) into it.
    """
    messages = [m for m in (mav.parse_buffer(data) or []) if m.get_type() != "BAD_DATA"]
    mav.buf, mav.buf_index = bytearray(), 0
    mav.expected_length = mavlink.HEADER_LEN_V1 + 2
    return messages
