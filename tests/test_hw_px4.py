"""PX4 over MAVLink: frames and codec, the offboard handshake against the emulator, and the launched graph.

Unit tests check the ENU/FLU <-> NED/FRD maps against an independent Euler construction, the setpoint
codec's round trip and refusals, and the serial transport on a pseudo-terminal. An emulator in this process
answers the handshake (OFFBOARD refused without a stream, accepted after; arming in Hold; COMMAND_ACK results) and
shows its offboard-loss failsafe timing. One start of launch/px4_real.launch.yaml with emulate:=true (bridge,
emulator and safety node as real processes) then carries the end-to-end checks, in order.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.ports import free_udp_ports
from pymavlink.dialects.v20 import common as mavlink
from scipy.spatial.transform import Rotation

pytestmark = pytest.mark.realtime  # vehicles emulated on the wall clock: timed rates and tracking
rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import TwistStamped  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.control.rotations import quat_to_mat  # noqa: E402
from robot_rl.hardware import px4_codec as codec  # noqa: E402
from robot_rl.hardware.px4_emulator import EmulatorConfig, Px4Emulator  # noqa: E402
from robot_rl.hardware.px4_link import OffboardSession, Px4Link, SessionConfig, VehicleState  # noqa: E402
from robot_rl.robots import cf2x  # noqa: E402
from robot_rl.ros.launch_processes import LaunchedGraph, launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.odometry import odometry_from_msg  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402

LIMITS = codec.SetpointLimits()
HOVER = codec.ThrustMap(0.55, cf2x.MASS)


def _quat(euler_zyx: tuple[float, float, float]) -> np.ndarray:
    """(w, x, y, z) of intrinsic yaw-pitch-roll."""
    return Rotation.from_euler("ZYX", euler_zyx).as_quat(scalar_first=True)


# --- frames and codec ----------------------------------------------------------------------------------------
def test_frames_match_an_independent_construction() -> None:
    assert codec.enu_to_ned(np.array([1.0, 2.0, 3.0])).tolist() == [2.0, 1.0, -3.0]  # east -> y, up -> -z
    assert codec.flu_to_frd(np.array([1.0, 2.0, 3.0])).tolist() == [1.0, -2.0, -3.0]  # left -> -right
    assert codec.yaw_enu_to_ned(0.0) == pytest.approx(np.pi / 2)  # facing east = heading 90 deg
    rng = np.random.default_rng(0)
    for _ in range(20):
        yaw, pitch, roll = rng.uniform(-np.pi, np.pi), rng.uniform(-1.2, 1.2), rng.uniform(-np.pi, np.pi)
        q_enu = _quat((yaw, pitch, roll))
        # FRD roll = FLU roll (right wing down), FRD pitch = -FLU pitch (nose up), NED yaw = pi/2 - ENU yaw
        expected = _quat((np.pi / 2 - yaw, -pitch, roll))
        got = codec.quat_enu_to_ned(q_enu)
        assert abs(float(got @ expected)) == pytest.approx(1.0, abs=1e-9)
        assert abs(float(codec.quat_ned_to_enu(got) @ q_enu)) == pytest.approx(1.0, abs=1e-9)
        v_body = rng.normal(size=3)  # one vector, seen in both conventions, is the same world vector
        world_enu = quat_to_mat(q_enu) @ v_body
        assert np.allclose(quat_to_mat(got) @ codec.flu_to_frd(v_body), codec.enu_to_ned(world_enu))
        assert codec.yaw_ned_to_enu(codec.yaw_enu_to_ned(yaw)) == pytest.approx(yaw)


def test_modes_and_thrust_scaling() -> None:
    assert codec.OFFBOARD == 6 << 16 and codec.HOLD == 0x03040000 and codec.LAND == 0x06040000
    assert codec.mode_name(codec.HOLD) == "AUTO_LOITER" and codec.mode_name(codec.OFFBOARD) == "OFFBOARD"
    assert HOVER.normalised(cf2x.MASS * 9.81) == pytest.approx(0.55)
    assert HOVER.newtons(HOVER.normalised(0.2)) == pytest.approx(0.2)


def _round_trip(setpoint: codec.Setpoint) -> tuple[mavlink.MAVLink_message, codec.Setpoint]:
    sender, receiver = mavlink.MAVLink(None, 1, 191), mavlink.MAVLink(None, 255, 0)
    wire = codec.encode_setpoint(sender, setpoint, 1234, 1).pack(sender)
    (msg,) = receiver.parse_buffer(wire)
    return msg, codec.decode_setpoint(msg)


def test_setpoint_codec_round_trip_and_fields() -> None:
    rates = codec.rates_setpoint(np.array([0.1, 0.2, 0.3]), cf2x.MASS * 9.81, HOVER, LIMITS)
    msg, back = _round_trip(rates)
    assert msg.get_type() == "SET_ATTITUDE_TARGET" and msg.type_mask == 128 and msg.target_system == 1
    assert isinstance(back, codec.RatesSetpoint)
    assert back.rates_frd == pytest.approx((0.1, -0.2, -0.3)) and back.thrust == pytest.approx(0.55)
    vel = codec.velocity_setpoint(np.array([1.0, 0.5, 0.2]), 0.3, LIMITS)
    msg, back = _round_trip(vel)
    assert msg.get_type() == "SET_POSITION_TARGET_LOCAL_NED" and msg.coordinate_frame == mavlink.MAV_FRAME_LOCAL_NED
    assert msg.type_mask == 0b0000_0101_1100_0111  # position, acceleration, yaw ignored
    assert isinstance(back, codec.VelocitySetpoint)
    assert back.velocity_ned == pytest.approx((0.5, 1.0, -0.2)) and back.yaw_rate == pytest.approx(-0.3)
    pos = codec.position_setpoint(np.array([1.0, 2.0, 3.0]), 0.0, LIMITS)
    msg, back = _round_trip(pos)
    assert msg.type_mask == 0b1001_1111_1000  # velocity, acceleration, yaw rate ignored
    assert isinstance(back, codec.PositionSetpoint)
    assert back.position_ned == pytest.approx((2.0, 1.0, -3.0)) and back.yaw == pytest.approx(np.pi / 2)


@pytest.mark.parametrize(("make", "reason"), [
    (lambda: codec.velocity_setpoint(np.array([np.nan, 0, 0]), 0.0, LIMITS), "velocity contains NaN"),
    (lambda: codec.velocity_setpoint(np.array([5.0, 0, 0]), 0.0, LIMITS), "speed 5 m/s exceeds 3.0"),
    (lambda: codec.velocity_setpoint(np.zeros(3), 9.0, LIMITS), "yaw rate 9 rad/s exceeds"),
    (lambda: codec.rates_setpoint(np.array([0, 0, 20.0]), 0.2, HOVER, LIMITS), "exceed 6.0 rad/s"),
    (lambda: codec.rates_setpoint(np.zeros(3), 1.0, HOVER, LIMITS), "outside [0, 1]"),
    (lambda: codec.rates_setpoint(np.zeros(3), -0.1, HOVER, LIMITS), "outside [0, 1]"),
    (lambda: codec.rates_setpoint(np.zeros(3), np.inf, HOVER, LIMITS), "thrust contains NaN or inf"),
    (lambda: codec.position_setpoint(np.array([0, 0, 100.0]), 0.0, LIMITS), "outside the box"),
])
def test_bad_setpoints_are_refused_with_a_reason(make: Callable[[], object], reason: str) -> None:
    with pytest.raises(codec.SetpointRefused, match=reason.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_decoder_refuses_what_it_does_not_emulate() -> None:
    mav = mavlink.MAVLink(None, 1, 191)
    attitude = mav.set_attitude_target_encode(0, 1, 1, 0, [1.0, 0, 0, 0], 0, 0, 0, 0.5)
    with pytest.raises(codec.SetpointRefused, match="only body rates"):
        codec.decode_setpoint(attitude)
    body_frame = mav.set_position_target_local_ned_encode(0, 1, 1, mavlink.MAV_FRAME_BODY_NED, codec.VELOCITY_MASK,
                                                          *[0.0] * 11)
    with pytest.raises(codec.SetpointRefused, match="not LOCAL_NED"):
        codec.decode_setpoint(body_frame)


def test_serial_transport_on_a_pseudo_terminal() -> None:
    master, slave = os.openpty()
    link = Px4Link(f"serial:{os.ttyname(slave)}:921600")
    try:
        vehicle = mavlink.MAVLink(None, 1, 1)
        hb = vehicle.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4,
                                      mavlink.MAV_MODE_FLAG_SAFETY_ARMED | 1, codec.OFFBOARD, 4)
        os.write(master, hb.pack(vehicle))
        assert link.poll(1.0) == 1 and link.state.armed and link.state.mode == "OFFBOARD"
        link.arm()
        (cmd,) = mavlink.MAVLink(None, 0, 0).parse_buffer(os.read(master, 1024))
        assert cmd.command == mavlink.MAV_CMD_COMPONENT_ARM_DISARM and cmd.param1 == 1 and cmd.target_system == 1
    finally:
        link.close()
        os.close(master)
        os.close(slave)


class FakeLink:
    """Px4Link's sending side, recorded; the test plays the vehicle by editing ``state``."""

    def __init__(self) -> None:
        self.state = VehicleState(heartbeat_time=0.0, system_id=1, custom_mode=codec.HOLD)
        self.acks: dict[int, tuple[int, float]] = {}
        self.calls: list[str] = []

    def link_up(self, timeout: float, now: float) -> bool:
        return now - self.state.heartbeat_time <= timeout

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Every other link method: recorded by name (a forced disarm as force_disarm)."""
        return lambda *args, force=False: self.calls.append(("force_" if force else "") + name)


def test_session_never_fights_a_pilot_and_repeats_the_estop() -> None:
    link = FakeLink()
    events: list[str] = []
    session = OffboardSession(link, SessionConfig(auto_arm=True, prestream_s=0.1, retry_s=0.05),  # type: ignore[arg-type]
                              lambda level, text: events.append(text))
    hold = codec.velocity_setpoint(np.zeros(3), 0.0, LIMITS)

    def run(t0: float, t1: float, stream: bool = True) -> None:
        for now in np.arange(t0, t1, 0.01):
            link.state.heartbeat_time = now
            if stream:
                session.command(hold, now)
            session.tick(now)
    run(0.0, 0.09)
    assert "set_offboard" not in link.calls and link.calls.count("send_setpoint") >= 8  # streams first
    run(0.09, 0.2)
    assert link.calls.count("set_offboard") == 2  # asked, no answer within retry_s, asked again
    link.state.custom_mode = codec.OFFBOARD
    run(0.2, 0.3)
    assert "arm" in link.calls
    link.state.armed = True
    run(0.3, 0.4)
    assert session.handshake_done and "offboard control active (armed)" in events
    link.state.custom_mode = codec.custom_mode(3)  # a pilot switched to Position mode on the RC
    n = len(link.calls)
    run(0.4, 1.0)
    assert "set_offboard" not in link.calls[n:]  # still streaming, but never switching back by itself
    run(1.0, 1.5, stream=False)  # the policy stops; when it starts again, that is a new stream
    assert not session.streaming
    run(1.5, 1.7)
    assert "set_offboard" in link.calls[n:]
    session.set_estop(True, 1.7)
    run(1.7, 2.2)
    assert link.calls.count("force_disarm") >= 2 and not session.streaming  # repeated until disarmed
    link.state.armed = False
    n = len(link.calls)
    run(2.2, 2.6)
    assert not {"force_disarm", "arm", "send_setpoint"} & set(link.calls[n:])


# --- the handshake against an emulator in this process ---------------------------------------------------------
def test_handshake_acks_and_offboard_loss_failsafe_timing() -> None:
    vehicle_port, offboard_port = free_udp_ports(2)
    link = Px4Link(f"udpin:127.0.0.1:{offboard_port}")
    emulator = Px4Emulator(EmulatorConfig(local_port=vehicle_port, remote_port=offboard_port))
    stop = threading.Event()
    thread = threading.Thread(target=emulator.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 3.0
        while not link.link_up(1.0) and time.monotonic() < deadline:
            link.poll(0.1)
        assert link.link_up(1.0)
        st = link.state
        assert st.mode == "AUTO_LOITER" and not st.armed  # boots in Hold, disarmed, on the ground
        link.set_offboard()  # no setpoint stream: PX4's commander refuses OFFBOARD
        assert link.wait_ack(mavlink.MAV_CMD_DO_SET_MODE, 1.0) == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
        link.command(mavlink.MAV_CMD_DO_REPOSITION)  # on the ground: nowhere to reposition to
        assert link.wait_ack(mavlink.MAV_CMD_DO_REPOSITION, 1.0) == mavlink.MAV_RESULT_TEMPORARILY_REJECTED
        link.command(mavlink.MAV_CMD_MISSION_START)  # no missions in the emulator
        assert link.wait_ack(mavlink.MAV_CMD_MISSION_START, 1.0) == mavlink.MAV_RESULT_UNSUPPORTED
        link.arm()  # Hold with a position estimate: PX4 arms, the motors idle on the ground
        assert link.wait_ack(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        link.disarm()
        assert link.wait_ack(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        assert not emulator.armed and emulator.events[-2:] == ["Armed by external command",
                                                               "Disarmed: external command"]
        link.request_param("MPC_THR_HOVER")
        for msg_id in (mavlink.MAVLINK_MSG_ID_HIGHRES_IMU, mavlink.MAVLINK_MSG_ID_HEARTBEAT):
            link.request_interval(msg_id, 100 if msg_id == mavlink.MAVLINK_MSG_ID_HIGHRES_IMU else 20)
            assert link.wait_ack(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        link.poll(0.2)
        assert st.params["MPC_THR_HOVER"] == pytest.approx(cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX), 1e-6)
        # telemetry at rest, NED/FRD: on the local origin, facing east (heading 90 deg), gravity along -z(FRD)
        assert np.abs(st.position_ned).max() < 0.01 and st.accel_frd[2] == pytest.approx(-9.81, abs=0.1)
        assert abs(float(st.quat_ned_frd @ _quat((np.pi / 2, 0.0, 0.0)))) == pytest.approx(1.0, abs=1e-3)
        assert any("Switching to Offboard is currently not available" in t for t in st.statustext)

        # stream setpoints (> 2 Hz), then OFFBOARD is accepted, then arming
        hold = codec.velocity_setpoint(np.zeros(3), 0.0, LIMITS)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            link.send_setpoint(hold)
            link.poll(0.02)
        link.set_offboard()
        assert link.wait_ack(mavlink.MAV_CMD_DO_SET_MODE, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        link.send_setpoint(hold)
        link.arm()
        assert link.wait_ack(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        deadline = time.monotonic() + 2.0
        while not (st.armed and st.mode == "OFFBOARD") and time.monotonic() < deadline:  # next heartbeat (20 Hz)
            link.send_setpoint(hold)
            link.poll(0.02)
        assert st.armed and st.mode == "OFFBOARD", emulator.events

        # the session streams; when its commands stop, so does the stream, and the vehicle holds
        # COM_OF_LOSS_T after the last setpoint (+ one heartbeat period at 20 Hz)
        session = OffboardSession(link, SessionConfig(auto_arm=True, prestream_s=0.1), lambda level, text: None)
        climb = codec.velocity_setpoint(np.array([0.0, 0.0, 0.5]), 0.0, LIMITS)
        last_sent, t_end = 0.0, time.monotonic() + 0.6
        while st.mode == "OFFBOARD" and time.monotonic() < t_end + 2.0:
            now = time.monotonic()
            if now < t_end:
                session.command(climb, now)
            sent = session.sent
            session.tick(now)
            last_sent = now if session.sent > sent else last_sent
            link.poll(0.002)
        delay = time.monotonic() - last_sent
        loss = emulator.params["COM_OF_LOSS_T"]
        assert st.mode == "AUTO_LOITER" and loss <= delay <= loss + 0.1, delay
        assert st.armed and -st.position_ned[2] > 0.05  # in the air, holding
        link.disarm(force=True)
        assert link.wait_ack(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1.0) == mavlink.MAV_RESULT_ACCEPTED
        assert "Disarmed: forced by external command (motors stopped)" in emulator.events
    finally:
        stop.set()
        thread.join(5)
        emulator.close()
        link.close()


# --- the launched graph --------------------------------------------------------------------------------------
COMMAND_TIMEOUT = 0.2
OF_LOSS = 0.5
HOVER_N = cf2x.MASS * 9.81


class Probe:
    """The outside node: streams commands like a policy node, records odometry and the bridge's diagnostics."""

    def __init__(self) -> None:
        self.node = rclpy.create_node("px4_probe")
        self.samples: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []
        """(time, ENU position, world velocity, body rates FLU)."""
        self.diag: dict[str, str] = {}
        self.diag_log: list[tuple[float, dict[str, str]]] = []
        self._quat = np.array([1.0, 0.0, 0.0, 0.0])
        self._pos = np.zeros(3)
        self.frames: set[str] = set()
        self.node.create_subscription(Odometry, "/odom", self._on_odometry, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.velocity = self.node.create_publisher(TwistStamped, "/target_velocity", 10)
        self.rates = self.node.create_publisher(TwistStamped, "/target_body_rates", 10)
        self.teleop_velocity = self.node.create_publisher(TwistStamped, "/teleop/cmd_vel", 10)
        self.intervention = self.node.create_publisher(Bool, "/intervention", LATCHED)
        self.estop = self.node.create_client(Trigger, "/safety/estop")
        self.reset = self.node.create_client(Trigger, "/safety/reset")

    def _on_odometry(self, msg: Odometry) -> None:
        self._pos, self._quat, lin, ang = odometry_from_msg(msg)
        v_world = quat_to_mat(self._quat) @ lin  # the twist is in the body frame (nav_msgs, REP 105)
        self.samples.append((time.monotonic(), self._pos.copy(), v_world, ang))
        self.frames |= {msg.header.frame_id, msg.child_frame_id}

    def _on_diag(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == "robot_rl/px4/vehicle":
                self.diag = {kv.key: kv.value for kv in status.values}
                self.diag_log.append((time.monotonic(), self.diag))

    def send_velocity(self, v: tuple[float, float, float], yaw_rate: float = 0.0) -> None:
        msg = TwistStamped()
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = v
        msg.twist.angular.z = yaw_rate
        self.velocity.publish(msg)

    def send_human_velocity(self, v: tuple[float, float, float]) -> None:
        msg = TwistStamped()
        msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = v
        self.teleop_velocity.publish(msg)

    def send_rates(self, rates: tuple[float, float, float], thrust: float = HOVER_N) -> None:
        msg = TwistStamped()
        msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = rates
        msg.twist.linear.z = thrust
        self.rates.publish(msg)

    def spin(self, seconds: float, publish: Callable[[], None] | None = None,
             until: Callable[[], bool] | None = None) -> bool:
        """Spin (publishing at 50 Hz) for ``seconds`` or until ``until()``; whether it became true."""
        deadline, next_pub = time.monotonic() + seconds, 0.0
        while time.monotonic() < deadline:
            if publish is not None and time.monotonic() >= next_pub:
                publish()
                next_pub = time.monotonic() + 0.02
            rclpy.spin_once(self.node, timeout_sec=0.005)
            if until is not None and until():
                return True
        return until is None

    def mean(self, since: float, field: int) -> np.ndarray:
        values = [np.asarray(s[field]) for s in self.samples if s[0] >= since]
        assert values, "no odometry in the window"
        return np.mean(np.stack(values), axis=0)

    @property
    def pos(self) -> np.ndarray:
        return self.samples[-1][1]

    def flying(self) -> bool:
        return self.diag.get("armed") == "true" and self.diag.get("mode") == "OFFBOARD"


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LaunchedGraph, Probe]]:
    offboard_port, vehicle_port = free_udp_ports(2)
    description = load_launch_file("px4_real.launch.yaml", {
        "emulate": "true", "offboard_port": str(offboard_port), "vehicle_port": str(vehicle_port),
        "connection": f"udpin:127.0.0.1:{offboard_port}", "auto_arm": "true", "prestream_s": "0.3",
        "command_timeout_s": str(COMMAND_TIMEOUT), "link_timeout_s": "0.5", "failsafe_hold_s": "0.5"})
    with launch(description, tmp_path_factory.mktemp("px4_logs")) as running:
        rclpy.init()
        probe = Probe()
        try:
            assert probe.spin(30, until=lambda: probe.diag.get("link") == "up" and len(probe.samples) > 10), \
                running.log("px4_bridge") + running.log("px4_emulator")
            yield running, probe
        finally:
            probe.node.destroy_node()
            rclpy.shutdown()
        codes = running.shutdown()
    assert all(code in (0, -2) for code in codes.values()), codes  # clean exits on SIGINT


def _call(probe: Probe, client: Any) -> None:
    assert client.wait_for_service(timeout_sec=10)
    future = client.call_async(Trigger.Request())
    assert probe.spin(5, until=future.done) and future.result().success


@pytest.mark.ros
@pytest.mark.slow
def test_graph_tracks_velocity_and_body_rate_setpoints(graph: tuple[LaunchedGraph, Probe]) -> None:
    running, probe = graph
    assert probe.diag["armed"] == "false" and probe.diag["mode"] == "AUTO_LOITER"
    # velocity: the stream starts, the bridge walks PX4 into OFFBOARD and arms, the vehicle climbs
    up = (0.0, 0.0, 0.6)
    assert probe.spin(8, lambda: probe.send_velocity(up), until=probe.flying), running.log("px4_bridge")
    probe.spin(1.2, lambda: probe.send_velocity(up))
    assert np.linalg.norm(probe.mean(time.monotonic() - 0.4, 2) - up) < 0.1, probe.samples[-1]
    start = probe.pos.copy()
    east = (0.5, 0.0, 0.0)
    probe.spin(1.5, lambda: probe.send_velocity(east))
    assert np.linalg.norm(probe.mean(time.monotonic() - 0.4, 2) - east) < 0.1, probe.samples[-1]
    assert probe.pos[0] - start[0] > 0.5 and abs(probe.pos[1] - start[1]) < 0.1  # moved east (ENU x)
    assert probe.frames == {"odom", "base_link"}
    # body rates + thrust [N]: yaw counter-clockwise, then a roll right-wing-down/up doublet (FLU signs)
    probe.spin(1.0, lambda: probe.send_rates((0.0, 0.0, 1.0)))
    assert abs(probe.mean(time.monotonic() - 0.4, 3)[2] - 1.0) < 0.15, probe.samples[-1]
    probe.spin(0.25, lambda: probe.send_rates((1.0, 0.0, 0.0)))
    assert probe.mean(time.monotonic() - 0.1, 3)[0] > 0.7
    probe.spin(0.25, lambda: probe.send_rates((-1.0, 0.0, 0.0)))
    assert probe.mean(time.monotonic() - 0.1, 3)[0] < -0.7
    probe.spin(0.5, lambda: probe.send_velocity((0.0, 0.0, 0.0)))
    assert probe.flying() and probe.pos[2] > 0.5


@pytest.mark.ros
@pytest.mark.slow
def test_the_human_takes_over_and_the_policy_is_dropped_until_release(graph: tuple[LaunchedGraph, Probe]) -> None:
    """Teleop semantics on a vendor bridge: during the intervention only teleop/cmd_vel reaches the vehicle."""
    running, probe = graph
    east, north = (0.5, 0.0, 0.0), (0.0, 0.5, 0.0)

    def both() -> None:  # the policy keeps streaming east while the human flies north
        probe.send_velocity(east)
        probe.send_human_velocity(north)
    assert probe.spin(5, lambda: probe.send_velocity((0.0, 0.0, 0.0)), until=probe.flying)
    probe.intervention.publish(Bool(data=True))
    assert probe.spin(3, both, until=lambda: probe.diag.get("intervention") == "true")
    probe.spin(1.5, both)
    assert np.linalg.norm(probe.mean(time.monotonic() - 0.4, 2) - north) < 0.1, probe.samples[-1]
    assert int(probe.diag["dropped_policy_commands"]) > 20 and probe.flying()
    probe.intervention.publish(Bool(data=False))
    assert probe.spin(3, both, until=lambda: probe.diag.get("intervention") == "false")
    probe.spin(1.5, both)
    assert np.linalg.norm(probe.mean(time.monotonic() - 0.4, 2) - east) < 0.1, probe.samples[-1]
    assert "intervention: the human commands" in running.log("px4_bridge")
    probe.spin(1.0, lambda: probe.send_velocity((0.0, 0.0, 0.0)))  # stopped for the next test


@pytest.mark.ros
@pytest.mark.slow
def test_bad_commands_are_refused_then_stream_loss_holds_and_lands(graph: tuple[LaunchedGraph, Probe]) -> None:
    running, probe = graph
    assert probe.spin(5, lambda: probe.send_velocity((0.0, 0.0, 0.0)), until=probe.flying)
    held = probe.pos.copy()
    bad = [lambda: probe.send_velocity((float("nan"), 0.0, 0.0)), lambda: probe.send_velocity((10.0, 0.0, 0.0)),
           lambda: probe.send_rates((0.0, 0.0, 50.0)), lambda: probe.send_rates((0.0, 0.0, 0.0), 10.0)]
    tick = iter(range(10**6))

    def good_and_bad() -> None:
        probe.send_velocity((0.0, 0.0, 0.0))
        bad[next(tick) % len(bad)]()
    probe.spin(1.0, good_and_bad)
    log = running.log("px4_bridge")
    for reason in ("refused target_velocity: velocity contains NaN or inf", "refused target_velocity: speed 10 m/s",
                   "refused target_body_rates: body rates [0.0, 0.0, 50.0] exceed",
                   "refused target_body_rates: thrust 10 N"):
        assert reason in log, log[-3000:]
    assert np.linalg.norm(probe.pos - held) < 0.1 and probe.flying()  # nothing bad reached the vehicle
    assert int(probe.diag["refused_commands"]) > 10

    # only bad commands now: nothing fresh, so the stream stops and PX4's failsafe holds, then lands
    t_stop = time.monotonic()
    probe.spin(3, lambda: bad[next(tick) % len(bad)](), until=lambda: probe.diag["mode"] != "OFFBOARD")
    t_hold = time.monotonic()
    assert probe.diag["mode"] == "AUTO_LOITER" and probe.diag["armed"] == "true"
    assert OF_LOSS <= t_hold - t_stop <= COMMAND_TIMEOUT + OF_LOSS + 0.1, t_hold - t_stop
    assert probe.spin(3, until=lambda: probe.diag["mode"] == "AUTO_LAND")
    assert np.linalg.norm(probe.pos - held) < 0.1  # held position until the land action
    assert probe.spin(6, until=lambda: probe.diag["armed"] == "false"), probe.diag
    assert probe.pos[2] < 0.05 and probe.diag["landed_state"] == "ON_GROUND"
    log = running.log("px4_emulator")
    assert "Failsafe activated: no offboard signal, holding" in log and "auto disarm on land" in log


@pytest.mark.ros
@pytest.mark.slow
def test_estop_force_disarms_and_keeps_the_vehicle_disarmed(graph: tuple[LaunchedGraph, Probe]) -> None:
    running, probe = graph
    up = (0.0, 0.0, 0.5)
    assert probe.spin(6, lambda: probe.send_velocity(up), until=probe.flying), running.log("px4_bridge")[-3000:]
    probe.spin(0.5, lambda: probe.send_velocity(up))
    future = probe.estop.call_async(Trigger.Request())
    t0 = time.monotonic()
    assert probe.spin(2, lambda: probe.send_velocity(up), until=lambda: probe.diag["armed"] == "false")
    assert time.monotonic() - t0 < 0.5 and future.done()
    assert probe.diag["estop"] == "true" and probe.diag["streaming"] == "false"
    probe.spin(1.0, lambda: probe.send_velocity(up))  # a policy still streaming cannot re-arm it
    assert probe.diag["armed"] == "false" and probe.pos[2] < 0.1  # fell, motors off
    assert "e-stop: force-disarming" in running.log("px4_bridge")
    assert "Disarmed: forced by external command (motors stopped)" in running.log("px4_emulator")
    probe.spin(0.5)
    _call(probe, probe.reset)
    assert probe.spin(2, until=lambda: probe.diag["estop"] == "false")


@pytest.mark.ros
@pytest.mark.slow
def test_emulator_restart_is_reported_and_rehandshaken(graph: tuple[LaunchedGraph, Probe]) -> None:
    running, probe = graph
    running.kill("px4_emulator")  # a crashed / rebooting flight controller; the launch file respawns it
    t0 = time.monotonic()
    assert probe.spin(3, until=lambda: probe.diag["link"] == "lost")
    lost_after = time.monotonic() - t0
    assert lost_after < 0.5 + 0.3
    assert probe.spin(20, until=lambda: probe.diag["link"] == "up"), running.log("px4_emulator")[-2000:]
    up = (0.0, 0.0, 0.5)
    assert probe.spin(6, lambda: probe.send_velocity(up), until=probe.flying), running.log("px4_bridge")[-3000:]
    log = running.log("px4_bridge")
    assert "link lost: no HEARTBEAT" in log and log.count("link up: PX4 system 1") >= 2
    assert log.count("COMMAND_ACK MAV_CMD_COMPONENT_ARM_DISARM: MAV_RESULT_ACCEPTED") >= 3  # one arming per flight
    recovered = time.monotonic() - t0
    probe.spin(0.5)
    assert running.is_running("px4_bridge") and running.is_running("safety")
    from helpers.fuzz import record_fault

    record_fault("px4 emulator: SIGKILL", happened=f"bridge reported the link lost after {lost_after:.2f} s and "
                 "stopped streaming; the respawned vehicle was re-handshaken (OFFBOARD, armed) on the next command "
                 "stream", recovery_s=round(recovered, 3), lost="nothing", robot="disarmed on the ground (reboot)",
                 link_lost_after_s=round(lost_after, 3))


def test_launch_file_resolves_for_a_serial_vehicle(tmp_path: Path) -> None:
    description = load_launch_file("px4_real.launch.yaml", {"connection": "serial:/dev/ttyTHS1:921600"})
    assert [p.name for p in description.processes] == ["px4_bridge", "safety"]
    assert "connection:=serial:/dev/ttyTHS1:921600" in description.processes[0].cmd
