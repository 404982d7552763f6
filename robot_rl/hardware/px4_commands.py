"""The emulated PX4's command and parameter protocols: COMMAND_LONG / COMMAND_INT -> COMMAND_ACK, PARAM_*.

Follows PX4 v1.15's commander and mavlink receiver as documented by PX4 and MAVLink (MAVLink command protocol,
https://mavlink.io/en/services/command.html; parameter protocol, https://mavlink.io/en/services/parameter.html;
the MAV_CMD definitions of common.xml). Every command is answered with exactly one COMMAND_ACK; a message the
command asks for follows the ACK.

=============================================  ==================================================================
MAV_CMD_COMPONENT_ARM_DISARM                   arm in Hold / Takeoff / Offboard (with a stream), not in Land or
                                               Return; param2 21196 forces (arm without checks, disarm in air);
                                               disarm only when landed unless forced
MAV_CMD_DO_SET_MODE                            PX4 custom modes: OFFBOARD (needs a stream), AUTO.LOITER (Hold),
                                               AUTO.LAND, AUTO.TAKEOFF and AUTO.RTL (armed); manual modes refused
MAV_CMD_NAV_TAKEOFF                            armed: climb to param7 (AMSL) if finite, else MIS_TAKEOFF_ALT
MAV_CMD_NAV_LAND / NAV_RETURN_TO_LAUNCH        armed (Return also in the air)
MAV_CMD_DO_REPOSITION                          in the air: fly to lat/lon/alt (COMMAND_INT x/y in degE7, frame
                                               GLOBAL = AMSL, GLOBAL_RELATIVE_ALT = above home), yaw param4
MAV_CMD_SET_MESSAGE_INTERVAL                   the emulator's streams (interval [us]; 0 default, -1 off)
MAV_CMD_REQUEST_MESSAGE                        AUTOPILOT_VERSION, HOME_POSITION and every stream, sent once
MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES         AUTOPILOT_VERSION (the older request)
anything else                                  MAV_RESULT_UNSUPPORTED
=============================================  ==================================================================

A refusal that PX4 explains with a STATUSTEXT is explained the same way here (e.g. "Arming denied: ...").
"""

from __future__ import annotations

import math

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.hardware import px4_telemetry
from robot_rl.hardware.px4_auto import RTL, SUB_RTL, SUB_TAKEOFF, TAKEOFF
from robot_rl.hardware.px4_codec import (
    FORCE_MAGIC,
    HOLD,
    LAND,
    MAIN_AUTO,
    MAIN_OFFBOARD,
    OFFBOARD,
    SUB_LAND,
    SUB_LOITER,
    command_name,
    ned_to_enu,
    yaw_ned_to_enu,
)
from robot_rl.hardware.px4_vehicle import EmulatedVehicle

_ACCEPTED, _REJECTED = mavlink.MAV_RESULT_ACCEPTED, mavlink.MAV_RESULT_TEMPORARILY_REJECTED
_DENIED, _UNSUPPORTED = mavlink.MAV_RESULT_DENIED, mavlink.MAV_RESULT_UNSUPPORTED
_CRITICAL = mavlink.MAV_SEVERITY_CRITICAL
_RELATIVE_FRAMES = (mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT, mavlink.MAV_FRAME_GLOBAL_RELATIVE_ALT_INT)


def handle(emu: EmulatedVehicle, msg: mavlink.MAVLink_message, now: float) -> None:
    """Execute one COMMAND_LONG / COMMAND_INT, ACK it, then send what it asked for."""
    if msg.get_type() == "COMMAND_INT":
        params = [msg.param1, msg.param2, msg.param3, msg.param4, msg.x * 1e-7, msg.y * 1e-7, msg.z]
        frame = int(msg.frame)
    else:
        params = [msg.param1, msg.param2, msg.param3, msg.param4, msg.param5, msg.param6, msg.param7]
        frame = mavlink.MAV_FRAME_GLOBAL
    reply: list[int] = []
    try:
        result = _command(emu, int(msg.command), [float(p) for p in params], frame, now, reply)
    except (ValueError, OverflowError) as exc:  # NaN / inf where the command needs an integer (mode, message id)
        emu.event(f"{command_name(msg.command)} denied: invalid parameter ({exc})", _CRITICAL)
        result, reply = _DENIED, []
    emu.mav.command_ack_send(msg.command, result, 0, 0, msg.get_srcSystem(), msg.get_srcComponent())
    for msg_id in reply:
        px4_telemetry.send(emu, msg_id, now)


def _command(emu: EmulatedVehicle, cmd: int, p: list[float], frame: int, now: float, reply: list[int]) -> int:
    if cmd == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
        return _arm_disarm(emu, p[0] > 0.5, abs(p[1] - FORCE_MAGIC) < 0.5, now)
    if cmd == mavlink.MAV_CMD_DO_SET_MODE:
        if not int(p[0]) & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED:
            return _DENIED
        return _set_mode(emu, int(p[1]), int(p[2]), now)
    if cmd == mavlink.MAV_CMD_NAV_TAKEOFF:
        return _takeoff(emu, p[6])
    if cmd == mavlink.MAV_CMD_NAV_LAND:
        return _set_mode(emu, MAIN_AUTO, SUB_LAND, now)
    if cmd == mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH:
        return _set_mode(emu, MAIN_AUTO, SUB_RTL, now)
    if cmd == mavlink.MAV_CMD_DO_REPOSITION:
        return _reposition(emu, p, frame)
    if cmd == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL:
        msg_id, interval = int(p[0]), p[1]
        if msg_id not in emu.intervals:
            return _DENIED
        default = 1.0 / px4_telemetry.DEFAULT_RATES[msg_id]
        emu.intervals[msg_id] = (default if interval == 0 else math.inf if interval < 0
                                 else max(interval * 1e-6, 1.0 / emu.config.tick_hz))
        emu.next_send[msg_id] = now
        return _ACCEPTED
    if cmd == mavlink.MAV_CMD_REQUEST_MESSAGE:
        msg_id = int(p[0])
        if msg_id != mavlink.MAVLINK_MSG_ID_AUTOPILOT_VERSION and msg_id not in emu.intervals:
            return _UNSUPPORTED
        reply.append(msg_id)
        return _ACCEPTED
    if cmd == mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES:
        reply.append(mavlink.MAVLINK_MSG_ID_AUTOPILOT_VERSION)
        return _ACCEPTED
    return _UNSUPPORTED


def _arm_disarm(emu: EmulatedVehicle, arm: bool, force: bool, now: float) -> int:
    if arm:
        if emu.armed:
            return _ACCEPTED
        why = None if force else emu.can_arm(now)
        if why is not None:
            emu.event(why, _CRITICAL)
            return _REJECTED
        emu.arm(now, force)
        return _ACCEPTED
    if not emu.armed:
        return _ACCEPTED
    if not force and not emu.landed():
        emu.event("Disarming denied: not landed", _CRITICAL)
        return _REJECTED
    emu.disarm("forced by external command (motors stopped)" if force else "external command")
    return _ACCEPTED


def _set_mode(emu: EmulatedVehicle, main: int, sub: int, now: float) -> int:
    if main == MAIN_OFFBOARD:
        if not emu.stream_alive(now):
            emu.event("Switching to Offboard is currently not available", _CRITICAL)
            return _REJECTED
        emu.set_mode(OFFBOARD, "external command")
        return _ACCEPTED
    if main == MAIN_AUTO and sub == SUB_LOITER:
        emu.failsafe_since = None
        emu.set_mode(HOLD, "external command")
        return _ACCEPTED
    if main == MAIN_AUTO and sub == SUB_TAKEOFF:
        return _takeoff(emu, math.nan)
    if main == MAIN_AUTO and sub in (SUB_LAND, SUB_RTL):
        if not emu.armed or (sub == SUB_RTL and not emu.airborne):
            emu.event(f"{'Land' if sub == SUB_LAND else 'Return'} denied: not flying", _CRITICAL)
            return _REJECTED
        emu.failsafe_since = None
        emu.set_mode(LAND if sub == SUB_LAND else RTL, "external command")
        if sub == SUB_RTL:
            emu.auto.start_rtl(emu.carrot)
        return _ACCEPTED
    emu.event(f"Switching to mode {main}/{sub} is not available (no RC)", _CRITICAL)
    return _REJECTED


def _takeoff(emu: EmulatedVehicle, altitude_amsl: float) -> int:
    if not emu.armed:
        emu.event("Takeoff denied: disarmed", _CRITICAL)
        return _REJECTED
    home_amsl = emu.geo.to_global(emu.local_ned(emu.auto.home))[2]
    above_home = altitude_amsl - home_amsl if math.isfinite(altitude_amsl) else None
    if above_home is not None and not 0.2 <= above_home <= 20.0:
        emu.event(f"Takeoff denied: altitude {above_home:.1f} m above home", _CRITICAL)
        return _DENIED
    emu.failsafe_since = None
    if not emu.airborne:
        emu.controller.reset(emu.state())
    emu.set_mode(TAKEOFF, "external command")
    emu.auto.takeoff(emu.carrot, above_home)
    return _ACCEPTED


def _reposition(emu: EmulatedVehicle, p: list[float], frame: int) -> int:
    if not (emu.armed and emu.airborne):
        emu.event("Reposition denied: not flying", _CRITICAL)
        return _REJECTED
    pos = emu.body().pos
    here = emu.local_ned(pos)
    lat, lon, alt = emu.geo.to_global(here)
    lat, lon = (p[4], p[5]) if math.isfinite(p[4]) and math.isfinite(p[5]) else (lat, lon)
    if math.isfinite(p[6]):
        home_amsl = emu.geo.to_global(emu.local_ned(emu.auto.home))[2]
        alt = p[6] + home_amsl if frame in _RELATIVE_FRAMES else p[6]
    goal = emu.origin + ned_to_enu(emu.geo.to_local(lat, lon, alt))
    if goal[2] < emu.origin[2] + 0.2 or np.linalg.norm(goal - pos) > 50.0:
        emu.event("Reposition denied: target below 0.2 m or beyond 50 m", _CRITICAL)
        return _DENIED
    emu.failsafe_since = None
    emu.set_mode(HOLD, "reposition")
    emu.auto.reposition(emu.carrot, goal, yaw_ned_to_enu(p[3]) if math.isfinite(p[3]) else None)
    return _ACCEPTED


def param(emu: EmulatedVehicle, msg: mavlink.MAVLink_message) -> None:
    """PARAM_REQUEST_LIST / PARAM_REQUEST_READ (by index when param_index >= 0, else by name) / PARAM_SET."""
    if msg.target_system not in (0, emu.config.system_id):
        return
    names = list(emu.params)
    kind = msg.get_type()
    if kind == "PARAM_REQUEST_LIST":
        wanted = names
    elif kind == "PARAM_REQUEST_READ" and msg.param_index >= 0:
        if msg.param_index >= len(names):
            return  # PX4 stays silent about an index it does not have
        wanted = [names[msg.param_index]]
    else:
        name = msg.param_id
        if name not in emu.params:
            return  # and about unknown names
        if kind == "PARAM_SET":
            value = float(msg.param_value)
            if not (math.isfinite(value) and value > 0 and (name != "MPC_THR_HOVER" or value < 1)):
                emu.event(f"param {name}: refused {value:g} (out of range)", _CRITICAL)  # PX4 checks min/max
            else:
                emu.params[name] = value
                emu.event(f"param {name} = {value:g}")
        wanted = [name]
    for name in wanted:
        emu.mav.param_value_send(name.encode(), emu.params[name], mavlink.MAV_PARAM_TYPE_REAL32, len(names),
                                 names.index(name))
