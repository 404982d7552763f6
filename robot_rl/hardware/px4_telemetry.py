"""What the emulated PX4 tells a ground station: HEARTBEAT flags, global position, home, battery, health, version.

Modelled on PX4 v1.15's MAVLink streams (``src/modules/mavlink/streams/*.hpp``, ``mavlink_messages.cpp``) and
the message definitions of MAVLink ``common.xml`` (https://mavlink.io/en/messages/common.html):

- HEARTBEAT.base_mode as PX4's ``get_mavlink_navigation_mode()``: always CUSTOM_MODE_ENABLED, SAFETY_ARMED when
  armed, AUTO | GUIDED | STABILIZE in every AUTO sub mode and in OFFBOARD, MANUAL_INPUT | STABILIZE | GUIDED in
  POSCTL (:func:`base_mode`).
- Global position: the local NED position reprojected around a fixed reference (PX4's ``MapProjection``, an
  azimuthal equidistant projection on a sphere of radius 6371 km), altitude AMSL = reference altitude - down
  (:class:`GeoFrame`). The reference defaults to PX4 SITL's home (``PX4_HOME_LAT/LON/ALT``: Zurich).
- SYS_STATUS sensor bits: the sensors a PX4 multirotor reports, all present/enabled/healthy (the state is the
  true one, nothing can fail here), plus ``MAV_SYS_STATUS_PREARM_CHECK`` healthy when arming would be allowed:
  MAVSDK's ``health.is_armable`` reads exactly that bit, ``is_global_position_ok`` the GPS bit.
- BATTERY_STATUS / SYS_STATUS battery fields from :class:`BatteryModel`, a 1S LiPo drained by an assumed
  current (a made-up but monotonic model: the numbers are plausible, not measured).
- AUTOPILOT_VERSION with PX4's version encoding (``major << 24 | minor << 16 | patch << 8 | type``).
"""

from __future__ import annotations

import math

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.control.rotations import quat_to_mat
from robot_rl.hardware.px4_auto import TAKEOFF
from robot_rl.hardware.px4_codec import (
    LAND,
    MAIN_AUTO,
    MAIN_OFFBOARD,
    enu_to_ned,
    flu_to_frd,
    quat_enu_to_ned,
    split_mode,
)
from robot_rl.hardware.px4_vehicle import BatteryModel, Body, EmulatedVehicle, GeoFrame
from robot_rl.robots import cf2x

MAIN_POSCTL = 3
_AUTO_FLAGS = (mavlink.MAV_MODE_FLAG_AUTO_ENABLED | mavlink.MAV_MODE_FLAG_STABILIZE_ENABLED
               | mavlink.MAV_MODE_FLAG_GUIDED_ENABLED)
SENSORS = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL
           | mavlink.MAV_SYS_STATUS_SENSOR_3D_MAG | mavlink.MAV_SYS_STATUS_SENSOR_ABSOLUTE_PRESSURE
           | mavlink.MAV_SYS_STATUS_SENSOR_GPS | mavlink.MAV_SYS_STATUS_AHRS
           | mavlink.MAV_SYS_STATUS_SENSOR_MOTOR_OUTPUTS | mavlink.MAV_SYS_STATUS_SENSOR_BATTERY)
"""SYS_STATUS sensors the emulated vehicle has (no RC receiver: PX4 then flags RC missing, not unhealthy)."""
PREARM = mavlink.MAV_SYS_STATUS_PREARM_CHECK
DEFAULT_RATES = {mavlink.MAVLINK_MSG_ID_HEARTBEAT: 1.0, mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION: 50.0,
                 mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED: 30.0, mavlink.MAVLINK_MSG_ID_HIGHRES_IMU: 50.0,
                 mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE: 5.0, mavlink.MAVLINK_MSG_ID_ATTITUDE: 20.0,
                 mavlink.MAVLINK_MSG_ID_GLOBAL_POSITION_INT: 20.0, mavlink.MAVLINK_MSG_ID_GPS_RAW_INT: 5.0,
                 mavlink.MAVLINK_MSG_ID_HOME_POSITION: 0.5, mavlink.MAVLINK_MSG_ID_SYS_STATUS: 2.0,
                 mavlink.MAVLINK_MSG_ID_BATTERY_STATUS: 1.0}
"""Stream rates [Hz] before any SET_MESSAGE_INTERVAL (roughly PX4's onboard-link defaults, lower for 2 cores)."""

_ON_GROUND, _IN_AIR, _LANDING, _TAKING_OFF = (mavlink.MAV_LANDED_STATE_ON_GROUND, mavlink.MAV_LANDED_STATE_IN_AIR,
                                              mavlink.MAV_LANDED_STATE_LANDING, mavlink.MAV_LANDED_STATE_TAKEOFF)
VERSION = (1, 15, 0)
"""The PX4 release whose behaviour the emulator follows."""
CAPABILITIES = (mavlink.MAV_PROTOCOL_CAPABILITY_PARAM_FLOAT | mavlink.MAV_PROTOCOL_CAPABILITY_COMMAND_INT
                | mavlink.MAV_PROTOCOL_CAPABILITY_SET_ATTITUDE_TARGET
                | mavlink.MAV_PROTOCOL_CAPABILITY_SET_POSITION_TARGET_LOCAL_NED
                | mavlink.MAV_PROTOCOL_CAPABILITY_MAVLINK2)
"""AUTOPILOT_VERSION.capabilities: only what the emulator implements (no missions, no FTP, no signing)."""


def base_mode(custom_mode: int, armed: bool) -> int:
    """HEARTBEAT.base_mode PX4 sends for ``custom_mode`` (PX4 ``get_mavlink_navigation_mode()``)."""
    flags = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mavlink.MAV_MODE_FLAG_SAFETY_ARMED if armed else 0)
    main, _ = split_mode(custom_mode)
    if main in (MAIN_AUTO, MAIN_OFFBOARD):
        flags |= _AUTO_FLAGS
    elif main == MAIN_POSCTL:
        flags |= (mavlink.MAV_MODE_FLAG_MANUAL_INPUT_ENABLED | mavlink.MAV_MODE_FLAG_STABILIZE_ENABLED
                  | mavlink.MAV_MODE_FLAG_GUIDED_ENABLED)
    return flags


def send_sys_status(mav: mavlink.MAVLink, battery: BatteryModel, prearm_ok: bool) -> None:
    """SYS_STATUS: sensor bits (pre-arm check healthy when arming would be allowed) and the battery."""
    health = SENSORS | (PREARM if prearm_ok else 0)
    mav.sys_status_send(SENSORS | PREARM, SENSORS | PREARM, health, 200, int(battery.voltage * 1000),
                        int(battery.current_a * 100), math.ceil(battery.remaining * 100), 0, 0, 0, 0, 0, 0)


def send_battery_status(mav: mavlink.MAVLink, battery: BatteryModel) -> None:
    """BATTERY_STATUS of the one battery, as PX4's stream fills it (id 0, LiPo, cell voltages, unused = max)."""
    cells = [int(battery.voltage * 1000)] + [65535] * 9
    mav.battery_status_send(0, mavlink.MAV_BATTERY_FUNCTION_ALL, mavlink.MAV_BATTERY_TYPE_LIPO, 32767, cells,
                            int(battery.current_a * 100), int(battery.discharged_mah), -1,
                            math.ceil(battery.remaining * 100), 0, mavlink.MAV_BATTERY_CHARGE_STATE_OK)


def send_autopilot_version(mav: mavlink.MAVLink, system_id: int) -> None:
    """AUTOPILOT_VERSION: PX4's version encoding (type DEV: this is not a PX4 build), no git hash, our capabilities."""
    major, minor, patch = VERSION
    sw = (major << 24) | (minor << 16) | (patch << 8) | mavlink.FIRMWARE_VERSION_TYPE_DEV
    mav.autopilot_version_send(CAPABILITIES, sw, 0, 0, 0, [0] * 8, [0] * 8, [0] * 8, 0x26AC, 0x1234,
                               0x5258_0000 + system_id)


def send_home(mav: mavlink.MAVLink, geo: GeoFrame, home_ned: np.ndarray, now_us: int) -> None:
    """HOME_POSITION: global and local home, approach vector zero, identity quaternion (as PX4)."""
    lat, lon, alt = geo.to_global(home_ned)
    mav.home_position_send(int(lat * 1e7), int(lon * 1e7), int(alt * 1000), *home_ned.astype(float),
                           [1.0, 0.0, 0.0, 0.0], 0.0, 0.0, 0.0, now_us)


def send(emu: EmulatedVehicle, msg_id: int, now: float, s: Body | None = None, ms: int | None = None) -> bool:
    """Send one telemetry message of ``emu`` now; False for one the emulator does not produce."""
    s = emu.body() if s is None else s
    mav = emu.mav
    ms = emu.time_ms(now) if ms is None else ms
    ned, v_ned = emu.local_ned(s.pos), enu_to_ned(s.linvel)
    q, w = quat_enu_to_ned(s.quat), flu_to_frd(s.angvel)
    if msg_id == mavlink.MAVLINK_MSG_ID_HEARTBEAT:
        status = (mavlink.MAV_STATE_CRITICAL if emu.failsafe_since is not None
                  else mavlink.MAV_STATE_ACTIVE if emu.armed else mavlink.MAV_STATE_STANDBY)
        mav.heartbeat_send(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4,
                                base_mode(emu.mode, emu.armed), emu.mode, status)
    elif msg_id == mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION:
        mav.attitude_quaternion_send(ms, *q, *w)
    elif msg_id == mavlink.MAVLINK_MSG_ID_ATTITUDE:
        w0, x, y, z = q
        roll = math.atan2(2 * (w0 * x + y * z), 1 - 2 * (x * x + y * y))
        pitch = math.asin(float(np.clip(2 * (w0 * y - z * x), -1.0, 1.0)))
        yaw = math.atan2(2 * (w0 * z + x * y), 1 - 2 * (y * y + z * z))
        mav.attitude_send(ms, roll, pitch, yaw, *w)
    elif msg_id == mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED:
        mav.local_position_ned_send(ms, *ned, *v_ned)
    elif msg_id in (mavlink.MAVLINK_MSG_ID_GLOBAL_POSITION_INT, mavlink.MAVLINK_MSG_ID_GPS_RAW_INT):
        lat, lon, alt = emu.geo.to_global(ned)
        home_alt = emu.geo.to_global(emu.local_ned(emu.auto.home))[2]
        hdg = int(math.degrees(math.atan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))) * 100)
        if msg_id == mavlink.MAVLINK_MSG_ID_GLOBAL_POSITION_INT:
            mav.global_position_int_send(ms, round(lat * 1e7), round(lon * 1e7),
                                              int(alt * 1000), int((alt - home_alt) * 1000),
                                              *(int(c * 100) for c in v_ned), hdg % 36000)
        else:
            speed = float(np.linalg.norm(v_ned[:2]))
            cog = int(math.degrees(math.atan2(v_ned[1], v_ned[0])) * 100) % 36000 if speed > 0.05 else 65535
            mav.gps_raw_int_send(int(ms * 1000), mavlink.GPS_FIX_TYPE_3D_FIX, round(lat * 1e7),
                                      round(lon * 1e7), int(alt * 1000), 80, 120, int(speed * 100), cog, 12)
    elif msg_id == mavlink.MAVLINK_MSG_ID_HOME_POSITION:
        send_home(mav, emu.geo, emu.local_ned(emu.auto.home), ms * 1000)
    elif msg_id == mavlink.MAVLINK_MSG_ID_SYS_STATUS:
        send_sys_status(mav, emu.battery, emu.armed or emu.can_arm(now) is None)
    elif msg_id == mavlink.MAVLINK_MSG_ID_BATTERY_STATUS:
        send_battery_status(mav, emu.battery)
    elif msg_id == mavlink.MAVLINK_MSG_ID_AUTOPILOT_VERSION:
        send_autopilot_version(mav, emu.config.system_id)
    elif msg_id == mavlink.MAVLINK_MSG_ID_HIGHRES_IMU:
        accel = emu.backend.data.qacc[:3] + np.array([0.0, 0.0, cf2x.GRAVITY])  # specific force, world
        f = flu_to_frd(quat_to_mat(s.quat).T @ accel)
        mav.highres_imu_send(emu.time_us(now), *f, *w, 0.2, 0.0, 0.4, 1013.0, 0.0,
                                  -enu_to_ned(s.pos)[2], 25.0, 0x1FFF)
    elif msg_id == mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE:
        landed = _ON_GROUND if not emu.armed or emu.landed() else _IN_AIR
        landed = _LANDING if (emu.mode == LAND or emu.auto.rtl_phase == "land") and landed == _IN_AIR else landed
        landed = _TAKING_OFF if emu.mode == TAKEOFF and emu.armed else landed
        mav.extended_sys_state_send(mavlink.MAV_VTOL_STATE_MC, landed)
    else:
        return False
    return True
