"""Crazyflie over cflib: wire conventions, the bridge's fail-safe, unmodified cflib against the emulator,
and the real-robot launch graph (emulate:=true) flown end to end with real processes.

The graph is started once (module fixture) and the end-to-end tests run in order on it: position setpoints,
body rates + thrust, refused commands, a tiny trained policy, the stale-command hover and landing, the
e-stop, and killing the emulator (the launch file respawns it, as a power-cycled vehicle) to see the link
lost and regained.
"""

from __future__ import annotations

import math
import re
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.ports import free_udp_port

from robot_rl.control.base import TargetRejected
from robot_rl.hardware.crazyflie_failsafe import (
    CrazyflieFailsafe,
    FailsafeConfig,
    FlightMode,
    PositionCommand,
    RateCommand,
)
from robot_rl.hardware.crazyflie_firmware import CrazyflieFirmware
from robot_rl.hardware.crazyflie_protocol import (
    STATE_LOG_VARIABLES,
    StateSample,
    ThrustMap,
    decode_state,
    encode_state,
    quat_compress,
    rates_to_rpyt,
    rpyt_packet_to_rates,
)
from robot_rl.robots import cf2x

pytestmark = pytest.mark.realtime  # vehicles emulated on the wall clock: timed rates and tracking

HOVER_THRUST = cf2x.MASS * cf2x.GRAVITY


# --- conversions ---------------------------------------------------------------------------------------------
def test_thrust_pwm_round_trip_and_hover_pwm() -> None:
    tm = ThrustMap()
    for thrust in (0.0, 0.05, HOVER_THRUST, 0.4):
        assert abs(tm.collective(tm.pwm(thrust)) - thrust) < 2e-5
    assert tm.pwm(4 * cf2x.THRUST_MAX) == 65535 and tm.pwm(10.0) == 65535 and tm.pwm(0.0) == 0
    assert 38000 < tm.pwm(HOVER_THRUST) < 48000  # a 27 g Crazyflie 2.x hovers at ~40-45k PWM


def test_body_rates_survive_cflib_packing_and_firmware_decoding() -> None:
    """cflib's own Commander packs the packet; the firmware's sign conventions must give the rates back."""
    from cflib.crazyflie.commander import Commander

    sent: list[Any] = []
    commander = Commander(type("FakeCf", (), {"send_packet": lambda self, pk: sent.append(pk)})())
    rates = np.array([0.7, -1.3, 2.1])
    commander.send_setpoint(*rates_to_rpyt(rates), ThrustMap().pwm(HOVER_THRUST))
    roll, pitch, yaw, pwm = struct.unpack("<fffH", bytes(sent[0].data))
    np.testing.assert_allclose(rpyt_packet_to_rates(roll, pitch, yaw), rates, atol=1e-6)
    firmware = CrazyflieFirmware(time.monotonic)
    firmware.params["flightmode.stabModeRoll"] = firmware.params["flightmode.stabModePitch"] = 0
    header = bytes([sent[0].header])
    firmware.handle(header + bytes(sent[0].data))
    assert firmware.setpoint is not None and firmware.setpoint.pwm == 0  # thrust locked until a zero packet
    firmware.handle(header + struct.pack("<fffH", 0, 0, 0, 0))
    firmware.handle(header + bytes(sent[0].data))
    assert firmware.setpoint.kind == "rates" and firmware.setpoint.pwm == pwm
    np.testing.assert_allclose(firmware.setpoint.rates, rates, atol=1e-6)


def test_state_log_block_round_trip_matches_cflib_decoding() -> None:
    from cflib.utils.encoding import decompress_quaternion

    quat = np.array([0.9, 0.1, -0.3, 0.2])
    quat /= np.linalg.norm(quat)
    values = encode_state(np.array([0.5, -1.2, 0.8]), np.array([0.3, 0.0, -0.4]), quat, np.array([0.5, -2.0, 1.0]), 3.9)
    sample = decode_state(values, 1.0)
    np.testing.assert_allclose(sample.position, [0.5, -1.2, 0.8], atol=1e-3)
    np.testing.assert_allclose(sample.velocity, [0.3, 0.0, -0.4], atol=1e-3)
    np.testing.assert_allclose(sample.rates, [0.5, -2.0, 1.0], atol=1e-3)
    np.testing.assert_allclose(sample.quat, quat, atol=3e-3)
    np.testing.assert_allclose(decompress_quaternion(quat_compress(quat[[1, 2, 3, 0]])), quat[[1, 2, 3, 0]], atol=3e-3)
    assert values["stateEstimateZ.ratePitch"] == 2000  # the firmware's legacy inverted pitch rate
    sizes = {"int16_t": 2, "uint32_t": 4, "float": 4}
    assert sum(sizes[t] for _, t in STATE_LOG_VARIABLES) == 26  # one log packet


# --- fail-safe -----------------------------------------------------------------------------------------------
def _sample(z: float = 1.0, vz: float = 0.0, t: float = 0.0, x: float = 0.0) -> StateSample:
    return StateSample(t, np.array([x, 0.0, z]), np.array([0.0, 0.0, vz]), np.array([1.0, 0, 0, 0]), np.zeros(3))


def test_failsafe_hovers_on_stale_commands_then_lands_and_stops() -> None:
    cfg = FailsafeConfig(watchdog_timeout=0.5, hover_time=2.0, land_speed=0.5)
    fs = CrazyflieFailsafe(cfg)
    fs.link(True, 0.0)
    assert fs.update(_sample(), 0.0).kind == "stop" and fs.mode == FlightMode.MOTORS_OFF
    fs.command(RateCommand(0.3, np.array([0.0, 0.0, 1.0])), 0.0)
    sp = fs.update(_sample(), 0.01)
    assert (sp.kind, fs.mode) == ("rates", FlightMode.FLYING) and sp.thrust == 0.3
    assert fs.update(_sample(), 0.5).kind == "rates"  # still fresh at exactly the timeout
    sp = fs.update(_sample(x=0.2), 0.51)
    assert fs.mode == FlightMode.HOVER and sp.kind == "position" and "stale command" in fs.reason
    np.testing.assert_allclose(sp.position, [0.2, 0.0, 1.0])
    assert fs.update(_sample(), 2.50).kind == "position" and fs.mode == FlightMode.HOVER
    sp = fs.update(_sample(), 2.52)
    assert fs.mode == FlightMode.LANDING
    sp = fs.update(_sample(vz=-0.5), 3.52)
    assert sp.kind == "position" and abs(sp.position[2] - 0.5) < 1e-6  # 0.5 m/s for 1 s
    assert fs.update(_sample(z=0.3, vz=-0.5), 4.62).position[2] == 0.0
    assert fs.update(_sample(z=0.07, vz=-0.2), 5.2).kind == "position"  # still sinking
    assert fs.update(_sample(z=0.065), 5.2).kind == "stop" and fs.mode == FlightMode.MOTORS_OFF
    fs.command(PositionCommand(np.array([0.0, 0.0, 0.5])), 6.0)  # a new command takes off again
    assert fs.update(_sample(z=0.065), 6.0).kind == "position" and fs.mode == FlightMode.FLYING
    assert [m for _, m, _ in fs.transitions][-5:] == ["flying", "hover_failsafe", "landing", "motors_off", "flying"]


def test_failsafe_refuses_bad_commands_and_keeps_flying() -> None:
    fs = CrazyflieFailsafe(FailsafeConfig(max_rate=10.0))
    fs.link(True, 0.0)
    fs.command(PositionCommand(np.array([0.0, 0.0, 1.0]), 0.3), 0.0)
    bad: list[tuple[PositionCommand | RateCommand, str]] = [
           (RateCommand(math.nan, np.zeros(3)), "NaN"), (RateCommand(0.3, np.array([0, math.inf, 0])), "NaN or inf"),
           (RateCommand(5.0, np.zeros(3)), "thrust 5 N outside"), (RateCommand(0.3, np.array([0, 0, 20.0])), "exceed"),
           (PositionCommand(np.array([0.0, 0.0, 9.0])), "outside the workspace box"),
           (PositionCommand(np.array([0.0, math.nan, 1.0])), "NaN")]
    for command, reason in bad:
        with pytest.raises(TargetRejected, match=reason.split()[0]):
            fs.command(command, 0.1)
        assert reason.split()[-1] in fs.last_refusal
    assert fs.rejected == len(bad)
    sp = fs.update(_sample(), 0.2)
    assert sp.kind == "position" and sp.yaw == 0.3 and fs.mode == FlightMode.FLYING


def test_failsafe_estop_link_loss_and_leaving_the_box() -> None:
    fs = CrazyflieFailsafe(FailsafeConfig())
    fs.link(True, 0.0)
    fs.command(RateCommand(0.3, np.zeros(3)), 0.0)
    assert fs.update(_sample(), 0.0).kind == "rates"
    sp = fs.update(_sample(x=2.5), 0.05)  # the vehicle left the box: hold at the box's edge
    assert fs.mode == FlightMode.HOVER and "left the workspace" in fs.reason
    np.testing.assert_allclose(sp.position, [2.0, 0.0, 1.0])
    fs.link(False, 0.1)
    assert fs.reported_mode == FlightMode.LINK_LOST and fs.mode == FlightMode.HOVER
    fs.link(True, 0.2)
    fs.command(RateCommand(0.3, np.zeros(3)), 0.3)
    fs.estop(True, 0.3)
    assert fs.update(_sample(), 0.31).kind == "stop" and fs.mode == FlightMode.MOTORS_OFF
    with pytest.raises(TargetRejected, match="e-stop engaged"):
        fs.command(RateCommand(0.3, np.zeros(3)), 0.4)
    fs.estop(False, 0.5)
    assert fs.update(_sample(), 0.6).kind == "stop"  # cleared, but motors off until the next command
    fs.command(RateCommand(0.3, np.zeros(3)), 0.7)
    assert fs.update(_sample(), 0.7).kind == "rates"


# --- unmodified cflib against the emulator ---------------------------------------------------------------------
def test_the_emulator_does_not_stall_at_take_off() -> None:
    """The first flying step ran the compiled law's first call (~0.7 s of numba cache loading), longer than the
    bridge's 0.5 s link timeout: the bridge saw the link lost at every take-off. A fresh process is needed to
    see it (in this one the kernels are loaded already)."""
    code = textwrap.dedent("""
        import struct, time
        from robot_rl.hardware.crazyflie_emulator import EmulatedCrazyflie
        v = EmulatedCrazyflie()
        v.firmware.armed = True
        v.firmware.handle(bytes([0x7C]) + struct.pack("<Bffff", 7, 0.0, 0.0, 0.6, 0.0))  # position setpoint
        t = time.perf_counter(); v.step(5); print(time.perf_counter() - t, v.state)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    seconds, state = out.stdout.split()
    assert state == "flying" and float(seconds) < 0.25, out.stdout


def test_cflib_connects_to_the_emulator_reads_tocs_params_and_logs_at_rate() -> None:
    import cflib.crtp
    from cflib.crazyflie import Crazyflie
    from cflib.crazyflie.log import LogConfig
    from cflib.crazyflie.syncCrazyflie import SyncCrazyflie

    from robot_rl.hardware.crazyflie_emulator import CrazyflieUdpServer, EmulatedCrazyflie

    vehicle = EmulatedCrazyflie()
    server = CrazyflieUdpServer(vehicle, port=free_udp_port())
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    from robot_rl.hardware.crazyflie_link import init_drivers

    init_drivers()
    assert cflib.crtp.get_link_driver  # the stock drivers, nothing patched
    try:
        with SyncCrazyflie(f"udp://127.0.0.1:{server.address[1]}", cf=Crazyflie(rw_cache=None)) as scf:
            cf = scf.cf
            assert cf.platform.get_protocol_version() == 12
            for name, ctype in STATE_LOG_VARIABLES:
                assert cf.log.toc.get_element_by_complete_name(name).ctype == ctype
            scf.wait_for_params()
            assert cf.param.get_value("flightmode.stabModeRoll") == "1"
            done = threading.Event()
            cf.param.add_update_callback(group="flightmode", name="stabModeRoll", cb=lambda n, v: done.set())
            cf.param.set_value("flightmode.stabModeRoll", 0)
            assert done.wait(2.0) and vehicle.firmware.params["flightmode.stabModeRoll"] == 0
            with pytest.raises(AttributeError, match="read-only"):
                cf.param.set_value("firmware.modified", 0)
            arrivals: list[float] = []
            block = LogConfig("state", 10)
            for name, ctype in STATE_LOG_VARIABLES:
                block.add_variable(name, ctype)
            cf.log.add_config(block)
            block.data_received_cb.add_callback(lambda ts, data, _: arrivals.append(time.monotonic()))
            block.start()
            time.sleep(0.8)
            block.stop()
            rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
            assert 90 < rate < 110, rate  # 100 Hz asked (10 ms period)
            assert cf.supervisor.read_bitfield() & 0x0040 == 0
            cf.supervisor.send_emergency_stop()
            deadline = time.monotonic() + 2.0
            while vehicle.state != "locked" and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.15)  # cflib caches the bitfield for 0.1 s
            assert vehicle.state == "locked" and cf.supervisor.read_bitfield() & 0x0040
    finally:
        server.stop()
        thread.join(2.0)
        server.close()


# --- the launch graph with the emulator --------------------------------------------------------------------------
GOAL = np.array([0.0, 0.0, 1.0])
"""The quadrotor_real launch file's goal_pos constant: where the hover policy flies to."""
QUAD_KEYS = ["position", "quat", "linvel", "angvel", "goal_pos", "goal_vel", "last_action"]


class Probe:
    """The test's ROS node: odometry, modes and diagnostics in; commands out."""

    def __init__(self) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from nav_msgs.msg import Odometry
        from std_msgs.msg import Bool, String
        from std_srvs.srv import Trigger

        from robot_rl.ros.qos import LATCHED

        rclpy.init()
        self.rclpy = rclpy
        self.node = rclpy.create_node("crazyflie_probe")
        self.poses: list[tuple[float, np.ndarray]] = []
        self.twists: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.modes: list[tuple[float, str]] = []
        self.diag: dict[str, str] = {}
        self.commands: list[float] = []
        self.yaw = 0.0
        n = self.node
        n.create_subscription(Odometry, "/odom", self._odometry, 50)
        n.create_subscription(String, "/controller/mode", lambda m: self.modes.append((time.monotonic(), m.data)),
                              LATCHED)
        n.create_subscription(DiagnosticArray, "/diagnostics", self._diag, 10)
        n.create_subscription(TwistStamped, "/target_body_rates", lambda m: self.commands.append(time.monotonic()), 50)
        self.pub_pose = n.create_publisher(PoseStamped, "/target_pose", 10)
        self.pub_rates = n.create_publisher(TwistStamped, "/target_body_rates", 10)
        self.pub_human = n.create_publisher(PoseStamped, "/teleop/target_pose", 10)
        self.pub_intervention = n.create_publisher(Bool, "/intervention", LATCHED)
        self.Bool = Bool
        self.estop_client: Any = n.create_client(Trigger, "/safety/estop")
        self.PoseStamped, self.TwistStamped, self.Trigger = PoseStamped, TwistStamped, Trigger

    def _odometry(self, msg: Any) -> None:
        """nav_msgs/Odometry: its pose and twist (body frame) have the layouts of PoseStamped and TwistStamped."""
        self._pose(msg.pose)
        self._twist(msg.twist)

    def _pose(self, msg: Any) -> None:
        p, q = msg.pose.position, msg.pose.orientation
        self.poses.append((time.monotonic(), np.array([p.x, p.y, p.z])))
        self.yaw = math.atan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))

    def _twist(self, msg: Any) -> None:
        lin, ang = msg.twist.linear, msg.twist.angular
        self.twists.append((time.monotonic(), np.array([lin.x, lin.y, lin.z]), np.array([ang.x, ang.y, ang.z])))

    def _diag(self, msg: Any) -> None:
        for status in msg.status:
            if status.name == "robot_rl/crazyflie/bridge":
                self.diag = {v.key: v.value for v in status.values}
                self.diag["message"] = status.message

    @property
    def position(self) -> np.ndarray:
        return self.poses[-1][1]

    @property
    def mode(self) -> str:
        return self.modes[-1][1] if self.modes else ""

    def spin(self, seconds: float, until: Any = None, tick: Any = None, period: float = 0.05) -> bool:
        deadline, next_tick = time.monotonic() + seconds, 0.0
        while time.monotonic() < deadline:
            if tick is not None and time.monotonic() >= next_tick:
                tick()
                next_tick = time.monotonic() + period
            self.rclpy.spin_once(self.node, timeout_sec=0.005)
            if until is not None and until():
                return True
        return until is None

    def send_pose(self, xyz: tuple[float, float, float], yaw: float = 0.0, human: bool = False) -> None:
        msg = self.PoseStamped()
        msg.header.frame_id = "world"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in xyz)
        msg.pose.orientation.w, msg.pose.orientation.z = math.cos(yaw / 2), math.sin(yaw / 2)
        (self.pub_human if human else self.pub_pose).publish(msg)

    def send_rates(self, thrust: float, rates: tuple[float, float, float]) -> None:
        msg = self.TwistStamped()
        msg.twist.linear.z = float(thrust)
        msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(v) for v in rates)
        self.pub_rates.publish(msg)

    def fly_to(self, xyz: tuple[float, float, float], seconds: float, yaw: float = 0.0) -> None:
        self.spin(seconds, tick=lambda: self.send_pose(xyz, yaw))

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.shutdown()


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    pytest.importorskip("rclpy")
    from helpers.tiny_policy import train_hovering_mlp

    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.launch_yaml import LaunchDescription, load_launch_file
    from robot_rl.sim.experts import HoverExpert

    tmp = tmp_path_factory.mktemp("crazyflie")
    args = {"emulate": "true", "emulator_port": str(free_udp_port()), "with_policy": "true",
            "policy_path": str(tmp / "policy"),
            "controller_overrides": "['quadrotor.hover_time=1.0','quadrotor.land_speed=0.6']"}
    description = load_launch_file("quadrotor_real.launch.yaml", args)
    policy_spec = next(p for p in description.processes if p.name == "policy")
    base = LaunchDescription(description.arguments, [p for p in description.processes if p.name != "policy"])
    with launch(base, tmp / "logs") as processes:
        policy = train_hovering_mlp("robot_rl/QuadHover-v0", HoverExpert(), QUAD_KEYS)  # while the graph starts
        policy.save(tmp / "policy")
        probe = Probe()
        try:
            yield {"processes": processes, "probe": probe, "policy": LaunchDescription(description.arguments,
                                                                                       [policy_spec]),
                   "tmp": tmp, "launch": launch}
        finally:
            probe.close()


@pytest.mark.ros
@pytest.mark.slow
class TestGraph:
    """In order, on one graph."""

    def test_state_streams_at_the_log_rate(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        assert probe.spin(20, until=lambda: len(probe.poses) > 20 and probe.mode), graph["processes"].log(
            "crazyflie_bridge")
        probe.poses.clear()
        probe.spin(0.5)
        stamps = [t for t, _ in probe.poses]
        assert (len(stamps) - 1) / (stamps[-1] - stamps[0]) > 70  # 100 Hz log block
        assert probe.mode == "motors_off" and probe.position[2] < 0.1  # at rest on the floor
        assert probe.twists and probe.spin(2, until=lambda: probe.diag.get("link_up") == "True")

    def test_position_setpoints_are_tracked(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        probe.fly_to((0.0, 0.0, 0.6), 2.0)
        assert probe.mode == "flying"
        assert np.linalg.norm(probe.position - [0.0, 0.0, 0.6]) < 0.08, probe.position
        probe.fly_to((0.3, -0.2, 0.8), 1.8)
        assert np.linalg.norm(probe.position - [0.3, -0.2, 0.8]) < 0.08, probe.position

    def test_the_human_takes_over_and_the_policy_is_dropped_until_release(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        policy, human = (0.3, -0.2, 0.8), (-0.1, 0.2, 0.8)

        def both() -> None:  # the policy keeps streaming its setpoint while the human flies elsewhere
            probe.send_pose(policy)
            probe.send_pose(human, human=True)
        probe.pub_intervention.publish(probe.Bool(data=True))
        assert probe.spin(2, tick=both, until=lambda: probe.diag.get("intervention") == "True")
        probe.spin(2.0, tick=both)
        assert np.linalg.norm(probe.position - human) < 0.08, probe.position
        assert int(probe.diag["dropped_policy_commands"]) > 20 and probe.mode == "flying"
        probe.pub_intervention.publish(probe.Bool(data=False))
        probe.spin(2.0, tick=both)
        assert np.linalg.norm(probe.position - policy) < 0.08, probe.position
        assert probe.diag.get("intervention") == "False"

    def test_body_rates_and_thrust_are_tracked(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        z0 = probe.position[2]
        probe.twists.clear()
        probe.spin(0.8, tick=lambda: probe.send_rates(HOVER_THRUST, (0.0, 0.0, 1.0)), period=0.02)
        late = np.array([w for t, _, w in probe.twists if t > probe.twists[-1][0] - 0.4])
        assert np.all(np.abs(late[:, 2] - 1.0) < 0.15), late[:, 2]  # yaw rate held within 0.15 rad/s
        assert np.all(np.abs(late[:, :2]) < 0.2)
        probe.spin(0.3, tick=lambda: probe.send_rates(HOVER_THRUST, (0.0, 0.0, 0.0)), period=0.02)
        assert abs(probe.twists[-1][2][2]) < 0.15  # and stopped again
        assert abs(probe.position[2] - z0) < 0.15  # hover thrust: no climb, no fall

    def test_bad_commands_are_refused_and_the_vehicle_holds(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        yaw = probe.yaw  # keep the heading the body-rate test left (the cf2x's yaw authority is small)
        probe.fly_to((0.0, 0.0, 0.8), 1.2, yaw)
        start = time.monotonic()
        rejected = int(probe.diag.get("rejected_targets", "0"))
        bad = [lambda: probe.send_rates(math.nan, (0, 0, 0)), lambda: probe.send_rates(5.0, (0, 0, 0)),
               lambda: probe.send_rates(HOVER_THRUST, (0, 50.0, 0)), lambda: probe.send_pose((0.0, 0.0, 5.0))]
        for send in bad:
            send()
            probe.fly_to((0.0, 0.0, 0.8), 0.25, yaw)
        probe.spin(1.5, until=lambda: int(probe.diag.get("rejected_targets", "0")) >= rejected + len(bad),
                   tick=lambda: probe.send_pose((0.0, 0.0, 0.8), yaw))
        assert int(probe.diag["rejected_targets"]) == rejected + len(bad)
        errors = [np.linalg.norm(p - [0.0, 0.0, 0.8]) for t, p in probe.poses if t > start]
        # the valid setpoint kept being followed: no kick from the refused ones, still converging
        assert max(errors) < errors[0] + 0.02 and errors[-1] < 0.08 and probe.mode == "flying", errors[::10]
        log = graph["processes"].log("crazyflie_bridge")
        for reason in ("rejected target_body_rates: thrust: contains NaN", "thrust 5 N outside",
                       "exceed 10 rad/s", "rejected target_pose: position [0.0, 0.0, 5.0] outside the workspace"):
            assert reason in log, log[-2000:]

    def test_stale_commands_hover_then_land(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        probe.send_pose((0.0, 0.0, 0.8), probe.yaw)
        last = time.monotonic()  # the last command: from now on the stream is silent
        assert probe.spin(2, until=lambda: probe.mode == "hover_failsafe")
        hover_at = probe.modes[-1][0]
        assert hover_at - last <= 0.5 + 0.1, hover_at - last  # watchdog_timeout 0.5 s + 100 ms
        held = probe.position.copy()
        assert probe.spin(2, until=lambda: probe.mode == "landing")
        landing_at = probe.modes[-1][0]
        assert 0.95 < landing_at - hover_at < 1.15  # hover_time 1 s (launch override)
        hover = [p for t, p in probe.poses if hover_at < t < landing_at]
        assert max(np.linalg.norm(p - held) for p in hover) < 0.05  # held in place
        assert probe.spin(4, until=lambda: probe.mode == "motors_off"), probe.modes
        assert (probe.position[2] < 0.1 and "landed" in probe.diag.get("message", "")) or probe.spin(
            1.5, until=lambda: "landed" in probe.diag.get("message", ""))

    def test_estop_cuts_the_motors(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        probe.fly_to((0.0, 0.0, 0.5), 1.5)
        assert probe.mode == "flying" and probe.position[2] > 0.3
        future = probe.estop_client.call_async(probe.Trigger.Request())
        t0 = time.monotonic()
        assert probe.spin(2, until=lambda: future.done() and probe.mode == "motors_off")
        assert time.monotonic() - t0 < 0.5
        assert probe.spin(1.5, until=lambda: probe.position[2] < 0.1)  # motors off: it falls
        probe.send_pose((0.0, 0.0, 0.5))
        assert probe.spin(1.5, until=lambda: "e-stop engaged" in graph["processes"].log("crazyflie_bridge"))

    def test_emulator_restart_is_seen_as_link_loss_and_reconnected(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        processes = graph["processes"]
        killed = time.monotonic()
        processes.kill("crazyflie_emulator")  # respawned by the launch file, as a power-cycled vehicle
        assert probe.spin(2, until=lambda: probe.mode == "link_lost")
        lost_after = time.monotonic() - killed
        assert lost_after < 0.5 + 0.3  # link_timeout_s + the worker's tick
        probe.poses.clear()
        assert probe.spin(15, until=lambda: probe.mode == "motors_off" and len(probe.poses) > 10), \
            processes.log("crazyflie_bridge")[-2000:]
        assert probe.spin(2, until=lambda: int(probe.diag.get("reconnects", "0")) >= 1)
        assert probe.position[2] < 0.1 and processes.is_running("crazyflie_bridge")
        from helpers.fuzz import record_fault

        record_fault("crazyflie emulator: SIGKILL", happened=f"bridge reported link_lost after {lost_after:.2f} s; the "
                     "respawned vehicle was reconnected, at rest with the motors off", recovery_s=round(
                         time.monotonic() - killed, 3), lost="nothing", robot="stopped (motors off, on the floor)",
                     link_lost_after_s=round(lost_after, 3))

    def test_a_trained_policy_flies_the_emulated_crazyflie(self, graph: dict[str, Any]) -> None:
        probe: Probe = graph["probe"]
        reset: Any = probe.node.create_client(probe.Trigger, "/safety/reset")
        assert reset.wait_for_service(timeout_sec=10)  # a request sent before the client has matched is lost
        future = reset.call_async(probe.Trigger.Request())
        assert probe.spin(10, until=lambda: future.done()) and future.result().success, future.result()
        assert probe.spin(2, until=lambda: probe.diag.get("estop") == "False")  # the bridge heard it
        rejected = int(probe.diag.get("rejected_targets", "0"))
        probe.commands.clear()  # the probe heard its own body-rate commands before
        probe.fly_to((0.0, 0.0, 0.9), 1.5)
        with graph["launch"](graph["policy"], graph["tmp"] / "policy_logs") as policy:
            # take off on position setpoints while the policy node loads; it takes over with its first command
            assert probe.spin(30, until=lambda: probe.commands, tick=lambda: probe.send_pose((0.0, 0.0, 0.9))), \
                policy.log("policy")
            assert probe.position[2] > 0.5
            start = time.monotonic()
            probe.spin(3.0)  # the behaviour-cloned hover policy flies from 0.9 m to its goal (0, 0, 1) and holds
            flown = [p for t, p in probe.poses if t > start]
            assert len([t for t in probe.commands if t > start]) >= 120  # ~50 Hz of body-rate commands
            assert int(probe.diag["rejected_targets"]) == rejected  # every command in range and accepted
            assert probe.mode == "flying" and "following RateCommand" in probe.diag["message"], probe.diag
            assert all(p[2] > 0.5 for p in flown) and len(flown) > 200
            held = np.array([p for t, p in probe.poses if t > time.monotonic() - 0.5])
            assert np.linalg.norm(held.mean(axis=0) - GOAL) < 0.05 and np.ptp(held, axis=0).max() < 0.05, held[-1]
            assert policy.wait_for_log("policy", "thrust_body_rates on target_body_rates")
            policy.kill("policy")  # SIGKILL: a crashed policy, its stream stops now
            probe.spin(0.05)
            last = probe.commands[-1]
            assert probe.spin(2, until=lambda: probe.mode == "hover_failsafe")
            assert probe.spin(1, until=lambda: "stale command" in probe.diag["message"]), probe.diag
            # the fail-safe catches the policy's crash within 0.1 s of watchdog_timeout (0.5 s), timed on the
            # bridge's clock from the last command it took; this probe's clock adds its own delivery and spin
            # delays (once 1.01 s in a full parallel run), bounded by the 2 s wait above
            age = float(re.search(r"none for ([0-9.]+) s", probe.diag["message"]).group(1))
            assert 0.5 <= age <= 0.5 + 0.1, (probe.diag["message"], probe.modes[-1][0] - last)
