"""MAVSDK's standard flows against px4_emulator, and pymavlink playing QGroundControl.

MAVSDK (the native ``mavsdk`` 4.x binding, in this process) connects like its examples do
(``udpin://<host>:<port>``, ``first_autopilot``) to an emulator thread, and one vehicle carries the flights
in order: health and armability, version, parameters, arming in Hold, takeoff to MIS_TAKEOFF_ALT, telemetry
checked against the emulator's true state, goto_location, offboard position control, land with auto-disarm,
Return. A second emulator answers pymavlink as a ground station would talk to it: parameters by index,
HEARTBEAT base_mode flags per mode. The geometry, flag table and bind option are checked without a network.
The flights are all ``slow``: the fast tier never runs half of the sequence.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers.ports import free_udp_port
from pymavlink import mavutil
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.hardware import px4_codec as codec
from robot_rl.hardware import px4_telemetry as telemetry
from robot_rl.hardware import px4_vehicle
from robot_rl.hardware.px4_auto import RTL, TAKEOFF
from robot_rl.hardware.px4_emulator import EmulatorConfig, Px4Emulator, _parse

pytestmark = pytest.mark.realtime("beside")  # vendor client and emulator on the wall clock, little CPU
mavsdk = pytest.importorskip("mavsdk.asyncio")
from mavsdk.asyncio.plugins.action import ActionAsync, ActionError  # noqa: E402
from mavsdk.asyncio.plugins.info import InfoAsync  # noqa: E402
from mavsdk.asyncio.plugins.offboard import OffboardAsync, PositionNedYaw  # noqa: E402
from mavsdk.asyncio.plugins.param import ParamAsync, ParamError, ParamResult  # noqa: E402
from mavsdk.asyncio.plugins.telemetry import FlightMode, TelemetryAsync  # noqa: E402

F = mavlink


def _start(params: dict[str, float] | None = None) -> tuple[Px4Emulator, threading.Event, threading.Thread, int]:
    vehicle_port, gcs_port = free_udp_port(), free_udp_port()
    emulator = Px4Emulator(EmulatorConfig(local_port=vehicle_port, remote_port=gcs_port), params)
    stop = threading.Event()
    thread = threading.Thread(target=emulator.run, args=(stop,), daemon=True)
    thread.start()
    return emulator, stop, thread, gcs_port


# --- without a network -----------------------------------------------------------------------------------------
def test_geo_frame_round_trip_and_scale() -> None:
    geo = px4_vehicle.GeoFrame()
    lat, lon, alt = geo.to_global(np.array([1.0, 0.0, -2.0]))
    assert (lat - geo.lat) * math.pi / 180 * px4_vehicle.EARTH_RADIUS == pytest.approx(1.0, abs=1e-6)  # 1 m north
    assert lon == pytest.approx(geo.lon, abs=1e-12) and alt == pytest.approx(geo.alt + 2.0)  # up 2 m
    _, lon_e, _ = geo.to_global(np.array([0.0, 1.0, 0.0]))
    metres_east = math.radians(lon_e - geo.lon) * px4_vehicle.EARTH_RADIUS * math.cos(math.radians(geo.lat))
    assert metres_east == pytest.approx(1.0, abs=1e-6)
    rng = np.random.default_rng(1)
    for ned in rng.uniform(-200, 200, size=(20, 3)):
        assert np.allclose(geo.to_local(*geo.to_global(ned)), ned, atol=1e-6)


def test_heartbeat_base_mode_flags_follow_px4() -> None:
    """PX4 get_mavlink_navigation_mode(): AUTO|GUIDED|STABILIZE in AUTO.* and OFFBOARD, POSCTL is manual+guided."""
    auto = F.MAV_MODE_FLAG_AUTO_ENABLED | F.MAV_MODE_FLAG_GUIDED_ENABLED | F.MAV_MODE_FLAG_STABILIZE_ENABLED
    custom, armed = F.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, F.MAV_MODE_FLAG_SAFETY_ARMED
    for mode in (codec.HOLD, codec.LAND, TAKEOFF, RTL, codec.OFFBOARD):
        assert telemetry.base_mode(mode, False) == custom | auto
        assert telemetry.base_mode(mode, True) == custom | auto | armed
    posctl = codec.custom_mode(3)
    assert telemetry.base_mode(posctl, False) == (custom | F.MAV_MODE_FLAG_MANUAL_INPUT_ENABLED
                                                  | F.MAV_MODE_FLAG_STABILIZE_ENABLED | F.MAV_MODE_FLAG_GUIDED_ENABLED)
    assert telemetry.base_mode(codec.HOLD, False) == 29 and telemetry.base_mode(codec.HOLD, True) == 157  # PX4 Hold


def test_bind_address_option() -> None:
    assert EmulatorConfig().bind == "127.0.0.1"
    config, _ = _parse(["--bind", "0.0.0.0", "--remote-host", "192.168.1.20", "--home", "52.0,4.5,10"])
    assert config.bind == "0.0.0.0" and config.home == (52.0, 4.5, 10.0)
    with pytest.raises(ValueError, match="loopback"):
        EmulatorConfig(remote_host="192.168.1.20")  # a loopback socket could not reach it
    with pytest.raises(ValueError, match="lat/lon/alt"):
        EmulatorConfig(home=(95.0, 0.0, 0.0))


# --- MAVSDK --------------------------------------------------------------------------------------------------
@dataclass
class Drone:
    """The emulator and MAVSDK's view of it, with the plugins the MAVSDK examples use."""

    emulator: Px4Emulator
    loop: asyncio.AbstractEventLoop
    telemetry: Any
    action: Any
    offboard: Any
    param: Any
    info: Any

    def run(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def wait(self, what: Callable[[], Awaitable[bool]], timeout: float, poll: float = 0.05) -> float:
        """Seconds until ``what()`` is true (polled); fails after ``timeout``."""
        async def waiting() -> float:
            t0 = time.monotonic()
            while not await what():
                assert time.monotonic() - t0 < timeout, f"not within {timeout} s; events {self.emulator.events}"
                await asyncio.sleep(poll)
            return time.monotonic() - t0
        return float(self.run(waiting()))

    def local(self) -> np.ndarray:
        """True position in PX4's local NED frame."""
        return self.emulator.local_ned(self.emulator.body().pos)


@pytest.fixture(scope="module")
def drone() -> Iterator[Drone]:
    emulator, stop, thread, port = _start()
    loop = asyncio.new_event_loop()
    config = mavsdk.Configuration.create_with_component_type(mavsdk.ComponentType.GROUND_STATION)
    sdk = mavsdk.Mavsdk(config)
    try:
        loop.run_until_complete(sdk.add_any_connection(f"udpin://127.0.0.1:{port}"))
        system = loop.run_until_complete(sdk.first_autopilot(timeout_s=15.0))
        assert system is not None, "MAVSDK found no autopilot"
        yield Drone(emulator, loop, TelemetryAsync(system), ActionAsync(system), OffboardAsync(system),
                    ParamAsync(system), InfoAsync(system))
    finally:
        sdk.destroy()
        loop.close()
        stop.set()
        thread.join(5)
        emulator.close()


@pytest.mark.slow
def test_connect_health_armable_and_version(drone: Drone) -> None:
    t = drone.telemetry

    async def healthy() -> bool:
        return bool(await t.health_all_ok())
    drone.wait(healthy, 10.0)
    health = drone.run(t.health())
    assert health.is_global_position_ok and health.is_home_position_ok and health.is_armable
    assert health.is_local_position_ok and health.is_gyrometer_calibration_ok
    version = drone.run(drone.info.get_version())
    assert (version.flight_sw_major, version.flight_sw_minor) == telemetry.VERSION[:2]
    assert drone.run(t.flight_mode()) == FlightMode.HOLD and drone.run(t.armed()) is False


@pytest.mark.slow
def test_params_by_name(drone: Drone) -> None:
    p = drone.param
    assert drone.run(p.get_param_float("MIS_TAKEOFF_ALT")) == pytest.approx(1.0)
    drone.run(drone.action.set_takeoff_altitude(1.2))  # MAVSDK writes MIS_TAKEOFF_ALT
    assert drone.emulator.params["MIS_TAKEOFF_ALT"] == pytest.approx(1.2)
    assert drone.run(drone.action.get_takeoff_altitude()) == pytest.approx(1.2)
    with pytest.raises(ParamError) as refused:  # PX4 does not answer an unknown name: MAVSDK times out
        drone.run(p.get_param_float("NOT_A_PARAM"))
    assert refused.value.result == ParamResult.TIMEOUT


@pytest.mark.slow
def test_arm_in_hold_idles_on_the_ground_then_preflight_disarm(drone: Drone) -> None:
    drone.run(drone.param.set_param_float("COM_DISARM_PRFLT", 1.5))
    try:
        z0 = drone.local()[2]
        drone.run(drone.action.arm())  # MAVSDK's offboard example arms in Hold
        t_arm = time.monotonic()
        assert drone.emulator.armed and drone.emulator.mode == codec.HOLD

        async def armed() -> bool:
            return bool(await drone.telemetry.armed())
        drone.wait(armed, 2.0)  # the next 1 Hz HEARTBEAT
        assert abs(drone.local()[2] - z0) < 0.01  # armed, but the motors idle: it does not lift off by itself

        async def disarmed() -> bool:
            return not await drone.telemetry.armed()
        drone.wait(disarmed, 4.0)
        waited = time.monotonic() - t_arm
        assert 1.5 <= waited <= 1.5 + 1.3, waited  # COM_DISARM_PRFLT after arming (+ one 1 Hz heartbeat)
        assert any("not taken off" in e for e in drone.emulator.events)
    finally:
        drone.run(drone.param.set_param_float("COM_DISARM_PRFLT", 10.0))


def _mode_is(drone: Drone, mode: FlightMode) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(await drone.telemetry.flight_mode() == mode)
    return check


@pytest.mark.slow
def test_takeoff_reaches_mis_takeoff_alt(drone: Drone) -> None:
    drone.run(drone.action.arm())
    drone.run(drone.action.takeoff())
    assert drone.emulator.mode == TAKEOFF
    drone.wait(lambda: _true(drone.emulator.mode == codec.HOLD), 8.0)  # Takeoff hands over to Hold at altitude
    time.sleep(1.5)
    alt = drone.run(drone.telemetry.position()).relative_altitude_m
    print(f"takeoff: MAVSDK relative altitude {alt:.3f} m for 1.2 m, true {-drone.local()[2]:.3f} m")
    assert alt == pytest.approx(1.2, abs=0.08), alt
    assert -drone.local()[2] == pytest.approx(1.2, abs=0.08)
    assert np.linalg.norm(drone.local()[:2]) < 0.05


async def _true(value: bool) -> bool:
    return value


@pytest.mark.slow
def test_telemetry_matches_the_emulator(drone: Drone) -> None:
    t, emu = drone.telemetry, drone.emulator
    ned = drone.local()
    pos, home = drone.run(t.position()), drone.run(t.home())
    lat, lon, alt = emu.geo.to_global(ned)
    assert pos.latitude_deg == pytest.approx(lat, abs=2e-7) and pos.longitude_deg == pytest.approx(lon, abs=2e-7)
    assert pos.absolute_altitude_m == pytest.approx(alt, abs=0.05)
    assert pos.relative_altitude_m == pytest.approx(-ned[2], abs=0.05)  # home was set at arming, on the ground
    assert home.latitude_deg == pytest.approx(emu.geo.lat, abs=1e-7)
    assert home.absolute_altitude_m == pytest.approx(emu.geo.alt, abs=0.01)
    euler = drone.run(t.attitude_euler())
    assert euler.yaw_deg == pytest.approx(90.0, abs=3.0)  # the cf2x starts facing east: heading 90 deg
    assert abs(euler.roll_deg) < 3.0 and abs(euler.pitch_deg) < 3.0
    battery = drone.run(t.battery())
    assert battery.voltage_v == pytest.approx(emu.battery.voltage, abs=0.05)
    assert abs(battery.remaining_percent - math.ceil(emu.battery.remaining * 100)) <= 1  # PX4 rounds up
    assert battery.capacity_consumed_ah * 1000 == pytest.approx(emu.battery.discharged_mah, abs=2.0)  # int, 1 Hz
    assert emu.battery.discharged_mah > 1.0  # it has been flying: some charge is gone
    assert battery.current_battery_a > emu.battery.idle_a  # motors running
    assert drone.run(t.flight_mode()) == FlightMode.HOLD and drone.run(t.in_air()) is True


@pytest.mark.slow
def test_goto_location(drone: Drone) -> None:
    emu = drone.emulator
    target_ned = np.array([1.0, -0.5, -1.0])
    lat, lon, alt = emu.geo.to_global(target_ned)
    drone.run(drone.action.goto_location(lat, lon, alt, float("nan")))

    def arrived() -> Awaitable[bool]:
        return _true(bool(np.linalg.norm(drone.local() - target_ned) < 0.1))
    drone.wait(arrived, 8.0)
    time.sleep(1.0)
    error = float(np.linalg.norm(drone.local() - target_ned))
    print(f"goto_location: 3D error {error:.3f} m, 1 s after arrival")
    assert error < 0.05, error
    assert drone.run(drone.telemetry.flight_mode()) == FlightMode.HOLD


@pytest.mark.slow
def test_land_and_auto_disarm(drone: Drone) -> None:
    drone.run(drone.action.land())
    assert drone.emulator.mode == codec.LAND

    async def disarmed() -> bool:
        return not await drone.telemetry.armed()
    drone.wait(disarmed, 10.0)
    assert -drone.local()[2] < 0.03 and "Disarmed: auto disarm on land" in drone.emulator.events


@pytest.mark.slow
def test_disarmed_vehicle_refuses_to_fly(drone: Drone) -> None:
    """Fail-safe: Takeoff, Return and goto need an armed (and, for the last two, flying) vehicle."""
    assert not drone.emulator.armed
    for request in (drone.action.takeoff(), drone.action.return_to_launch()):
        with pytest.raises(ActionError):
            drone.run(request)
    assert drone.emulator.mode == codec.HOLD and not drone.emulator.armed


@pytest.mark.slow
def test_offboard_position_ned_from_the_ground(drone: Drone) -> None:
    """MAVSDK's offboard_position_ned example: arm in Hold, an initial setpoint, start, fly, stop."""
    off = drone.offboard
    drone.run(drone.action.arm())
    here = drone.local()
    drone.run(off.set_position_ned(PositionNedYaw(*here.tolist(), 90.0)))  # facing east, as it stands
    drone.run(off.start())
    assert drone.emulator.mode == codec.OFFBOARD
    target = here + np.array([0.5, 0.5, -1.5])
    drone.run(off.set_position_ned(PositionNedYaw(*target.tolist(), 90.0)))

    heights: list[float] = []

    def arrived() -> Awaitable[bool]:
        heights.append(-drone.local()[2])
        return _true(bool(np.linalg.norm(drone.local() - target) < 0.1))
    drone.wait(arrived, 8.0)
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        heights.append(-drone.local()[2])
        time.sleep(0.02)
    error = float(np.linalg.norm(drone.local() - target))
    overshoot = max(heights) + target[2]
    print(f"offboard position: 3D error {error:.3f} m 1 s after arrival, climb overshoot {overshoot:.3f} m")
    # 0.5 cm unloaded; the cf2x z loop overshoots ~6-9 cm and, on a loaded CI machine, is still settling 1 s
    # after arrival (6.9 cm measured twice in full-suite runs): the bound is for a vehicle that got there
    assert error < 0.10 and overshoot < 0.15, (error, overshoot)
    assert drone.run(drone.telemetry.flight_mode()) == FlightMode.OFFBOARD
    drone.run(off.stop())  # MAVSDK switches to Hold
    assert drone.emulator.mode == codec.HOLD and drone.emulator.armed


@pytest.mark.slow
def test_return_to_launch(drone: Drone) -> None:
    emu = drone.emulator
    home = emu.local_ned(emu.auto.home)  # set where the last arming happened
    assert np.linalg.norm(drone.local()[:2] - home[:2]) > 0.5  # away from it
    drone.run(drone.action.return_to_launch())
    assert emu.mode == RTL
    drone.wait(lambda: _true(emu.auto.rtl_phase == "land"), 8.0)  # climbs to RTL_RETURN_ALT, flies home
    drone.wait(lambda: _true(not emu.armed), 10.0)  # lands, disarms
    error = float(np.linalg.norm(drone.local()[:2] - home[:2]))
    print(f"return: landed {error:.3f} m from home")
    assert error < 0.1, error
    assert -drone.local()[2] < 0.03 and emu.mode == codec.HOLD
    assert "mode AUTO_RTL: external command" in emu.events and "Disarmed: auto disarm on land" in emu.events[-2:]


# --- pymavlink as QGroundControl -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qgc() -> Iterator[tuple[Px4Emulator, Any]]:
    emulator, stop, thread, port = _start()
    conn = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=255, source_component=190,
                                      dialect="common")
    try:
        assert conn.wait_heartbeat(timeout=10) is not None
        yield emulator, conn
    finally:
        stop.set()
        thread.join(5)
        emulator.close()
        conn.close()


def _heartbeat(conn: Any, until: Callable[[Any], bool], timeout: float = 3.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = conn.recv_match(type="HEARTBEAT", blocking=True, timeout=0.5)
        if msg is not None and msg.get_srcComponent() == 1 and until(msg):
            return msg
    raise AssertionError("no such HEARTBEAT")


def _ack(conn: Any, command: int) -> int:
    msg = conn.recv_match(type="COMMAND_ACK", blocking=True, timeout=2.0, condition=f"COMMAND_ACK.command=={command}")
    assert msg is not None
    return int(msg.result)


def test_qgc_reads_parameters_by_index_and_by_list(qgc: tuple[Px4Emulator, Any]) -> None:
    emulator, conn = qgc
    names = list(emulator.params)
    conn.mav.param_request_read_send(1, 1, b"", names.index("MIS_TAKEOFF_ALT"))
    msg = conn.recv_match(type="PARAM_VALUE", blocking=True, timeout=2.0)
    assert msg.param_id == "MIS_TAKEOFF_ALT" and msg.param_index == names.index("MIS_TAKEOFF_ALT")
    assert msg.param_value == pytest.approx(1.0) and msg.param_count == len(names)
    assert msg.param_type == F.MAV_PARAM_TYPE_REAL32
    conn.mav.param_request_read_send(1, 1, b"", len(names))  # no such index: PX4 does not answer
    assert conn.recv_match(type="PARAM_VALUE", blocking=True, timeout=0.5) is None
    conn.mav.param_request_list_send(1, 1)
    got: dict[int, str] = {}
    while len(got) < len(names):
        msg = conn.recv_match(type="PARAM_VALUE", blocking=True, timeout=2.0)
        assert msg is not None, got
        got[msg.param_index] = msg.param_id
    assert [got[i] for i in range(len(names))] == names
    conn.mav.param_set_send(1, 1, b"MPC_LAND_SPEED", -1.0, F.MAV_PARAM_TYPE_REAL32)  # a value that could never land
    msg = conn.recv_match(type="PARAM_VALUE", blocking=True, timeout=2.0)
    assert msg.param_id == "MPC_LAND_SPEED" and msg.param_value == pytest.approx(0.5)  # refused, old value echoed
    assert emulator.params["MPC_LAND_SPEED"] == 0.5


def test_qgc_sees_heartbeat_flags_per_mode(qgc: tuple[Px4Emulator, Any]) -> None:
    emulator, conn = qgc
    auto = F.MAV_MODE_FLAG_AUTO_ENABLED | F.MAV_MODE_FLAG_GUIDED_ENABLED | F.MAV_MODE_FLAG_STABILIZE_ENABLED
    custom = F.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
    hb = _heartbeat(conn, lambda m: True)
    assert hb.autopilot == F.MAV_AUTOPILOT_PX4 and hb.type == F.MAV_TYPE_QUADROTOR
    assert hb.custom_mode == codec.HOLD and hb.base_mode == custom | auto and hb.system_status == F.MAV_STATE_STANDBY
    conn.mav.command_long_send(1, 1, F.MAV_CMD_COMPONENT_ARM_DISARM, 0, 1, 0, 0, 0, 0, 0, 0)
    assert _ack(conn, F.MAV_CMD_COMPONENT_ARM_DISARM) == F.MAV_RESULT_ACCEPTED
    hb = _heartbeat(conn, lambda m: m.base_mode & F.MAV_MODE_FLAG_SAFETY_ARMED)
    assert hb.base_mode == custom | auto | F.MAV_MODE_FLAG_SAFETY_ARMED and hb.system_status == F.MAV_STATE_ACTIVE
    conn.mav.command_long_send(1, 1, F.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, float("nan"), float("nan"), float("nan"),
                               float("nan"))
    assert _ack(conn, F.MAV_CMD_NAV_TAKEOFF) == F.MAV_RESULT_ACCEPTED
    hb = _heartbeat(conn, lambda m: m.custom_mode == TAKEOFF)
    assert hb.base_mode == custom | auto | F.MAV_MODE_FLAG_SAFETY_ARMED
    conn.mav.command_long_send(1, 1, F.MAV_CMD_DO_SET_MODE, 0, custom, 3, 0, 0, 0, 0, 0)  # POSCTL: needs RC
    assert _ack(conn, F.MAV_CMD_DO_SET_MODE) == F.MAV_RESULT_TEMPORARILY_REJECTED
    conn.mav.command_long_send(1, 1, F.MAV_CMD_REQUEST_MESSAGE, 0, F.MAVLINK_MSG_ID_AUTOPILOT_VERSION, 0, 0, 0, 0, 0, 0)
    assert _ack(conn, F.MAV_CMD_REQUEST_MESSAGE) == F.MAV_RESULT_ACCEPTED
    version = conn.recv_match(type="AUTOPILOT_VERSION", blocking=True, timeout=2.0)
    assert version is not None and version.flight_sw_version >> 16 == (1 << 8) | 15
    assert version.capabilities & F.MAV_PROTOCOL_CAPABILITY_COMMAND_INT
    conn.mav.command_long_send(1, 1, F.MAV_CMD_COMPONENT_ARM_DISARM, 0, 0, codec.FORCE_MAGIC, 0, 0, 0, 0, 0)
    assert _ack(conn, F.MAV_CMD_COMPONENT_ARM_DISARM) == F.MAV_RESULT_ACCEPTED
    assert not emulator.armed
