"""Property-based fuzzing of the vendor protocol entry points of the robot emulators and bridges.

Every entry point gets a few hundred generated inputs (random bytes, wrong lengths, well-formed messages with
hostile field values: NaN, inf, out-of-range modes and parameters). The properties: no exception escapes the
long-running handler, each input is handled in bounded time, bad input is refused (a return value, a counter
or a logged reason) and the robot stays safe: a grounded vehicle does not arm, take off or spin its motors
from garbage, a bad-CRC command never changes the applied one, and a valid command still works afterwards.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Iterator

import numpy as np
import pytest
from helpers.fuzz import bounded, fuzz_settings, tally
from helpers.ports import free_udp_port
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.hardware import crazyflie_protocol as cfp
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.crazyflie_emulator import EmulatedCrazyflie
from robot_rl.hardware.crazyflie_firmware import CrazyflieFirmware
from robot_rl.hardware.px4_codec import HOLD, SetpointRefused, decode_setpoint
from robot_rl.hardware.px4_emulator import EmulatorConfig as Px4Config
from robot_rl.hardware.px4_emulator import Px4Emulator
from robot_rl.hardware.px4_link import Px4Link
from robot_rl.hardware.unitree_bridge import UnitreeBridge, UnitreeBridgeConfig
from robot_rl.hardware.unitree_emulator import EmulatorConfig as G1Config
from robot_rl.hardware.unitree_emulator import G1Emulator

pytestmark = pytest.mark.robot_dds  # the Unitree bridge and emulator speak DDS on domain 0

CASES = 200
"""Generated inputs per entry point (each runs in well under 10 ms)."""
PER_INPUT_S = 0.5
"""Bound on the CPU time of handling one input (a pathological slow path fails the property)."""
FUZZ = fuzz_settings(CASES)

any_float = st.floats(allow_nan=True, allow_infinity=True, width=32)
hostile_float = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30, 21196.0]), any_float)


def _timed(fn, *args):  # type: ignore[no-untyped-def]
    return bounded(fn, *args, cpu_s=PER_INPUT_S)


# --- Crazyflie -----------------------------------------------------------------------------------------------
def _crtp(port: int, channel: int, body: bytes) -> bytes:
    return bytes([((port & 0xF) << 4) | 0x0C | (channel & 0x3)]) + body


ECHO = _crtp(cfp.PORT_LINK, 0, b"ping")
crtp_packets = st.builds(lambda h, body: bytes([h]) + body, st.integers(0, 255), st.binary(max_size=40))
float_setpoints = st.builds(
    lambda port_kind, values: (_crtp(3, 0, struct.pack("<fffH", *values[:3], 0)) if port_kind is None
                               else _crtp(7, 0, bytes([port_kind]) + struct.pack("<ffff", *values))),
    st.sampled_from([None, cfp.TYPE_POSITION, cfp.TYPE_VELOCITY_WORLD, cfp.TYPE_HOVER]),
    st.tuples(hostile_float, hostile_float, hostile_float, hostile_float))
NAN_POSITION = _crtp(7, 0, bytes([cfp.TYPE_POSITION]) + struct.pack("<ffff", math.nan, 0.0, 0.5, 0.0))


@pytest.fixture(scope="module")
def crazyflie() -> EmulatedCrazyflie:
    return EmulatedCrazyflie()


@settings(FUZZ)
@given(packets=st.lists(st.one_of(crtp_packets, float_setpoints), min_size=1, max_size=8))
@example(packets=[NAN_POSITION])  # crashed the emulator's control step (TargetRejected) before the fix
def test_crazyflie_firmware_survives_any_crtp(packets: list[bytes]) -> None:
    fw = CrazyflieFirmware(time.monotonic)
    for packet in packets:
        before = fw.setpoint
        replies = _timed(fw.handle, packet)
        tally("vendor: Crazyflie firmware (CRTP)", "setpoint taken" if fw.setpoint is not before
              else "answered" if replies else "ignored or refused")
        assert isinstance(replies, list) and all(isinstance(r, bytes) and len(r) >= 1 for r in replies)
        sp = fw.setpoint
        if sp is not None:  # whatever was accepted is a setpoint a controller can follow
            assert all(np.all(np.isfinite(v)) for v in (sp.position, sp.velocity, sp.acceleration, sp.rates,
                                                        sp.angles, [sp.yaw, sp.yaw_rate, sp.pwm]))
            assert 0.0 <= sp.pwm <= 65535.0
    assert fw.handle(ECHO) == [ECHO]  # the link still answers


def test_crazyflie_non_finite_setpoint_is_refused_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    fw = CrazyflieFirmware(time.monotonic)
    fw.handle(_crtp(7, 0, bytes([cfp.TYPE_POSITION]) + struct.pack("<ffff", 0.0, 0.0, 0.5, 0.0)))
    before = fw.setpoint
    assert fw.handle(NAN_POSITION) == []
    assert fw.setpoint is before and "non-finite position setpoint refused" in caplog.text


def _setpoint_floats(packet: bytes) -> tuple[float, ...]:
    """The floats of a ``float_setpoints`` packet (port 3: roll, pitch, yaw; port 7: after the type byte)."""
    return struct.unpack_from("<ffff", packet, 2) if packet[0] >> 4 == 7 else struct.unpack_from("<fff", packet, 1)


# Garbage that is not a command: bytes on the non-commander ports, and every port's packets cut short.
_SAFE_PORTS = [cfp.PORT_LINK, cfp.PORT_PLATFORM, cfp.PORT_MEM, cfp.PORT_LOG, cfp.PORT_PARAM, 0, 1, 10, 11, 12, 14]
grounded_garbage = st.one_of(
    st.builds(lambda port, ch, body: _crtp(port, ch, body), st.sampled_from(_SAFE_PORTS), st.integers(0, 3),
              st.binary(max_size=30).filter(lambda b: b[:1] != b"\x02")),  # not a param write
    st.builds(lambda ch, body: _crtp(cfp.PORT_COMMANDER, ch, body), st.integers(0, 3), st.binary(max_size=13)),
    st.builds(lambda kind, body: _crtp(cfp.PORT_GENERIC_COMMANDER, 0, bytes([kind]) + body),
              st.sampled_from([cfp.TYPE_POSITION, cfp.TYPE_VELOCITY_WORLD, cfp.TYPE_HOVER, cfp.TYPE_FULL_STATE,
                               cfp.TYPE_MANUAL]), st.binary(max_size=8)),
    float_setpoints.filter(lambda pk: not all(map(math.isfinite, _setpoint_floats(pk)))),
)


@settings(fuzz_settings(CASES // 2))
@given(packets=st.lists(grounded_garbage, min_size=1, max_size=6))
@example(packets=[NAN_POSITION])
def test_crazyflie_emulator_motors_stay_off_on_the_ground(crazyflie: EmulatedCrazyflie,
                                                          packets: list[bytes]) -> None:
    vehicle = crazyflie
    vehicle.firmware.setpoint = None  # on the ground, nothing commanded yet
    vehicle.firmware.params["stabilizer.stop"] = 0.0
    for packet in packets:
        _timed(vehicle.firmware.handle, packet)
        _timed(vehicle.step, 5)
        tally("vendor: Crazyflie emulator on the ground (CRTP garbage)", "motors stayed off")
        assert np.all(vehicle.thrusts == 0.0) and vehicle.state in ("ready", "locked")
    assert float(vehicle.sim.data.qpos[2]) < 0.1
    assert vehicle.firmware.handle(ECHO) == [ECHO]


# --- PX4 -----------------------------------------------------------------------------------------------------
_COMMANDS = [mavlink.MAV_CMD_COMPONENT_ARM_DISARM, mavlink.MAV_CMD_DO_SET_MODE, mavlink.MAV_CMD_NAV_TAKEOFF,
             mavlink.MAV_CMD_NAV_LAND, mavlink.MAV_CMD_NAV_RETURN_TO_LAUNCH, mavlink.MAV_CMD_DO_REPOSITION,
             mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, mavlink.MAV_CMD_REQUEST_MESSAGE,
             mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES, 0, 65535]
_ENCODER = mavlink.MAVLink(None, srcSystem=245, srcComponent=mavlink.MAV_COMP_ID_ONBOARD_COMPUTER)
_PARAM_NAMES = [b"COM_OF_LOSS_T", b"MPC_THR_HOVER", b"COM_DISARM_PRFLT", b"NO_SUCH_PARAM", b""]


def _pack(msg: mavlink.MAVLink_message) -> bytes:
    return bytes(msg.pack(_ENCODER, force_mavlink1=False))


def _command_long(cmd: int, params: list[float], target: int) -> bytes:
    return _pack(mavlink.MAVLink_command_long_message(target, 1, cmd, 0, *params))


def _command_int(cmd: int, params: list[float], frame: int, x: int, y: int) -> bytes:
    return _pack(mavlink.MAVLink_command_int_message(1, 1, frame, cmd, 0, 0, *params[:4], x, y, params[4]))


mav_messages = st.one_of(
    st.builds(_command_long, st.sampled_from(_COMMANDS), st.lists(hostile_float, min_size=7, max_size=7),
              st.sampled_from([0, 1])),
    st.builds(_command_int, st.sampled_from(_COMMANDS), st.lists(hostile_float, min_size=5, max_size=5),
              st.integers(0, 255), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda name, value: _pack(mavlink.MAVLink_param_set_message(1, 1, name, value, 9)),
              st.sampled_from(_PARAM_NAMES), hostile_float),
    st.builds(lambda name, index: _pack(mavlink.MAVLink_param_request_read_message(1, 1, name, index)),
              st.sampled_from(_PARAM_NAMES), st.integers(-32768, 32767)),
    st.builds(lambda mask, vals: _pack(mavlink.MAVLink_set_position_target_local_ned_message(
        0, 1, 1, mavlink.MAV_FRAME_LOCAL_NED, mask, *vals)), st.integers(0, 65535),
        st.lists(hostile_float, min_size=11, max_size=11)),
    st.builds(lambda mask, vals: _pack(mavlink.MAVLink_set_attitude_target_message(
        0, 1, 1, mask, vals[:4], *vals[4:])), st.integers(0, 255), st.lists(hostile_float, min_size=8, max_size=8)),
)
mav_garbage = st.one_of(st.binary(max_size=300), mav_messages.flatmap(
    lambda raw: st.integers(0, max(0, len(raw) - 1)).map(lambda i: raw[:i] + bytes([raw[i] ^ 0x5A]) + raw[i + 1:])))
NAN_SET_MODE = _command_long(mavlink.MAV_CMD_DO_SET_MODE, [math.nan] * 7, 1)
INF_INTERVAL = _command_long(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, [math.inf, 0, 0, 0, 0, 0, 0], 1)


def _is_arm(raw: bytes) -> bool:
    """Whether a datagram carries a (valid-CRC) arm request."""
    parser = mavlink.MAVLink(None)
    parser.robust_parsing = True
    for msg in parser.parse_buffer(raw) or []:
        if msg.get_type() in ("COMMAND_LONG", "COMMAND_INT") and msg.command == mavlink.MAV_CMD_COMPONENT_ARM_DISARM \
                and msg.param1 > 0.5:
            return True
    return False


@pytest.fixture(scope="module")
def px4() -> Iterator[tuple[Px4Emulator, socket.socket]]:
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    emulator = Px4Emulator(Px4Config(local_port=free_udp_port(), remote_port=sender.getsockname()[1]))
    yield emulator, sender
    emulator.close()
    sender.close()


def _deliver(emu: Px4Emulator, sender: socket.socket, raw: bytes) -> None:
    if raw:
        sender.sendto(raw, emu.sock.getsockname())
    _timed(emu.receive, time.monotonic())
    _timed(emu._update, time.monotonic())


@settings(FUZZ)
@given(datagrams=st.lists(st.one_of(mav_garbage, mav_messages), min_size=1, max_size=6))
@example(datagrams=[NAN_SET_MODE])
@example(datagrams=[INF_INTERVAL])
def test_px4_emulator_survives_garbage_and_hostile_messages(px4: tuple[Px4Emulator, socket.socket],
                                                            datagrams: list[bytes]) -> None:
    emu, sender = px4
    emu.disarm("fuzz case reset")
    emu.mode, emu.setpoint, emu.failsafe_since = HOLD, None, None
    emu.params["COM_OF_LOSS_T"], emu.params["MPC_THR_HOVER"] = 1.0, 0.5
    z0 = float(emu.body().pos[2])
    for raw in datagrams:
        events = len(emu.events)
        _deliver(emu, sender, raw)
        tally("vendor: PX4 emulator (MAVLink datagrams)", "armed (valid arm request)" if emu.armed
              else "denied" if any("denied" in e for e in emu.events[events:]) else "handled, disarmed")
        if emu.armed:  # only an explicit, well-formed arm request arms the vehicle
            assert any(_is_arm(d) for d in datagrams)
    if not any(_is_arm(d) for d in datagrams):  # garbage alone: disarmed, and the motors stay off
        assert not emu.armed
        emu.backend.step(50, emu.actuators, emu._control)
        assert not np.any(emu.backend.data.ctrl[emu.actuators])
    assert abs(float(emu.body().pos[2]) - z0) < 0.05  # no take-off
    emu.disarm("fuzz case end")
    assert all(math.isfinite(v) and v > 0 for v in emu.params.values())
    _deliver(emu, sender, _command_long(mavlink.MAV_CMD_REQUEST_AUTOPILOT_CAPABILITIES, [0.0] * 7, 1))


def test_px4_command_with_nan_integer_parameter_is_denied(px4: tuple[Px4Emulator, socket.socket]) -> None:
    emu, sender = px4
    _deliver(emu, sender, b"\xfd\x01")  # a truncated frame swallowed the next datagram before the fix
    for raw in (NAN_SET_MODE, INF_INTERVAL):
        events = len(emu.events)
        _deliver(emu, sender, raw)  # raised ValueError / OverflowError out of the receive loop before the fix
        assert any("denied: invalid parameter" in e for e in emu.events[events:])
    assert emu.mode == HOLD and not emu.armed


@settings(FUZZ)
@given(datagrams=st.lists(st.one_of(mav_garbage, mav_messages), min_size=1, max_size=6))
def test_px4_bridge_decoder_survives_garbage(datagrams: list[bytes]) -> None:
    port = free_udp_port()
    link = Px4Link(f"udpin:127.0.0.1:{port}")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for raw in [*datagrams, b"\xfd\x01"]:
                s.sendto(raw, ("127.0.0.1", port))
                _timed(link.poll, 0.05)
                tally("vendor: PX4 bridge link (MAVLink datagrams)", "no vehicle heard")
            assert not link.state.armed and link.vehicle_system_id == 0  # no autopilot heartbeat heard
            hb = mavlink.MAVLink(None, srcSystem=1, srcComponent=mavlink.MAV_COMP_ID_AUTOPILOT1)
            beat = bytes(hb.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4, 0, 0,
                                             mavlink.MAV_STATE_STANDBY).pack(hb))
            # A datagram carries whole frames: the truncated frame that ended the last one (b"\xfd\x01")
            # swallows nothing, the very next heartbeat is heard (it swallowed up to 280 bytes before the fix).
            s.sendto(beat, ("127.0.0.1", port))
            heard = link.poll(1.0)
            assert heard >= 1 and link.vehicle_system_id == 1  # valid messages still get through
    finally:
        link.close()


@settings(FUZZ)
@given(raw=mav_messages)
def test_px4_decode_setpoint_refuses_or_returns_finite(raw: bytes) -> None:
    parser = mavlink.MAVLink(None)
    for msg in parser.parse_buffer(raw) or []:
        try:
            sp = decode_setpoint(msg)
        except SetpointRefused as exc:
            assert str(exc)
            tally("vendor: PX4 setpoint decoder", "refused: SetpointRefused")
            continue
        tally("vendor: PX4 setpoint decoder", "accepted (finite)")
        values = np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in vars(sp).values()])
        assert np.all(np.isfinite(values))


# --- Unitree -------------------------------------------------------------------------------------------------
def _image(dtype: np.dtype, raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, np.uint8).copy().view(dtype).reshape(())


def _with_crc(image: np.ndarray) -> np.ndarray:
    image["crc"] = idl.unitree_crc(image)
    return image


def _valid_lowcmd() -> np.ndarray:
    cmd = idl.MotorCommands.zeros()
    cmd.mode[:29], cmd.kp[:29], cmd.q[:29] = 1, 40.0, 0.1
    return idl.lowcmd_image(idl.MODE_PR, 5, cmd)


@pytest.fixture(scope="module")
def g1() -> G1Emulator:
    return G1Emulator(G1Config())


@settings(FUZZ)
@given(raw=st.binary(min_size=idl.LOWCMD_C.itemsize, max_size=idl.LOWCMD_C.itemsize), fix_crc=st.booleans())
def test_unitree_emulator_lowcmd_acceptance(g1: G1Emulator, raw: bytes, fix_crc: bool) -> None:
    valid = _valid_lowcmd()
    assert g1.apply(valid)
    applied = g1.command
    image = _image(idl.LOWCMD_C, raw)
    if fix_crc:
        _with_crc(image)
    accepted = _timed(g1.apply, image)
    assert accepted == idl.crc_ok(image)
    tally("vendor: Unitree emulator (LowCmd)", "accepted (valid CRC)" if accepted else "refused: bad CRC")
    if not accepted:  # a bad-CRC LowCmd never changes the applied command
        assert g1.command is applied
    torque = _timed(g1._motor_pd)  # whatever was accepted, the torque is finite and within the effort limits
    assert np.all(np.isfinite(torque)) and np.all(np.abs(torque) <= g1.effort)
    assert g1.apply(valid) and g1.command is not None and applied is not None
    assert np.array_equal(g1.command.kp, applied.kp)  # a valid command still works


@settings(FUZZ)
@given(data=st.binary(max_size=1200), size=st.sampled_from([0, 4, 8, 1000, 1003, 1004, 1005, 2092]))
@example(data=b"", size=1003)  # raised numpy's "buffer size must be a multiple of element size" before the fix
def test_unitree_codecs_on_wrong_lengths(data: bytes, size: int) -> None:
    for codec in (idl.LOWCMD_CDR, idl.LOWSTATE_CDR):
        image = _timed(codec.decode, data)
        assert image is None or image.dtype == codec.c_dtype
        tally("vendor: Unitree CDR codecs", "refused: malformed" if image is None else "decoded")
        image = codec.decode(idl.CDR_LE_HEADER + data)
        assert image is None or image.dtype == codec.c_dtype
    blob = (data * (size // max(len(data), 1) + 1))[:size] if data else bytes(size)
    if len(blob) < 8 or len(blob) % 4:
        with pytest.raises(ValueError, match="two whole 32-bit words"):
            idl.unitree_crc(blob)
    else:
        assert 0 <= _timed(idl.unitree_crc, blob) <= 0xFFFFFFFF


def test_unitree_crc_detects_every_single_bit_flip_sample() -> None:
    image = _valid_lowcmd()
    raw = np.frombuffer(image.tobytes(), np.uint8)
    rng = np.random.default_rng(0)
    for pos in rng.integers(0, idl.LOWCMD_C.itemsize - 4, 200):
        bad = raw.copy()
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        assert not idl.crc_ok(_image(idl.LOWCMD_C, bad.tobytes()))


def _finite_reading(image: np.ndarray) -> bool:
    m, imu = image["motor_state"][:29], image["imu_state"]
    return all(np.all(np.isfinite(a)) for a in (m["q"], m["dq"], m["tau_est"], imu["quaternion"],
                                                 imu["gyroscope"], imu["accelerometer"]))


def _inf_q_lowstate() -> bytes:
    image = np.zeros((), idl.LOWSTATE_C)
    image["motor_state"]["q"][3] = np.inf
    return image.tobytes()


@settings(FUZZ)
@given(raw=st.binary(min_size=idl.LOWSTATE_C.itemsize, max_size=idl.LOWSTATE_C.itemsize), fix_crc=st.booleans())
@example(raw=_inf_q_lowstate(), fix_crc=True)  # was taken, and the bridge then commanded q = inf
def test_unitree_bridge_lowstate_acceptance(g1: G1Emulator, raw: bytes, fix_crc: bool) -> None:
    bridge = UnitreeBridge(UnitreeBridgeConfig())
    good = g1.lowstate()
    assert bridge.on_state(good, 0.0)
    reading = bridge.reading
    image = _image(idl.LOWSTATE_C, raw)
    if fix_crc:
        _with_crc(image)
    accepted = _timed(bridge.on_state, image, 0.01)
    assert accepted == (idl.crc_ok(image) and _finite_reading(image))
    tally("vendor: Unitree bridge (LowState)", "accepted" if accepted else "refused: bad CRC"
          if not idl.crc_ok(image) else "refused: non-finite")
    if not accepted:  # dropped and counted; the last good reading stays
        assert bridge.reading is reading and bridge.bad_crc + bridge.rejected == 1
    cmd_image = _timed(bridge.tick, 0.02)
    assert cmd_image is not None and idl.crc_ok(cmd_image)
    cmd = idl.image_commands(cmd_image)  # the bridge never sends a non-finite command
    assert all(np.all(np.isfinite(a)) for a in cmd[1:])
    assert bridge.on_state(g1.lowstate(), 0.03)  # a valid LowState is still taken
