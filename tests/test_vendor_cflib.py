"""Bitcraze's cflib flows, as its examples (crazyflie-lib-python ``examples/``) write them, against the emulator.

Each test starts an emulated Crazyflie (:mod:`robot_rl.hardware.crazyflie_emulator`) on a free UDP port and
drives it with unmodified cflib: the MotionCommander (``step-by-step/sbs_motion_commander.py``,
``autonomy/motion_commander_demo.py``), the PositionHlCommander, the HighLevelCommander with
``cflib.utils.reset_estimator`` and an uploaded trajectory (``autonomy/autonomous_sequence_high_level.py``,
with a two-piece trajectory of ours in place of its figure-8), basic logging (``logging/basiclog.py``),
parameters (``parameters/basicparam.py``, ``step-by-step/sbs_connect_log_param.py``) and the supervisor.
Positions are checked against the simulator's state; the errors measured are printed (``pytest -s``).
"""

from __future__ import annotations

import itertools
import math
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from helpers.ports import free_udp_port

from robot_rl.control.rotations import quat_to_mat
from robot_rl.hardware import crazyflie_protocol as p
from robot_rl.hardware.crazyflie_emulator import CrazyflieUdpServer, EmulatedCrazyflie
from robot_rl.hardware.crazyflie_firmware import PRIORITY_CRTP, PRIORITY_HIGH_LEVEL, CrazyflieFirmware
from robot_rl.hardware.crazyflie_high_level import FLYING, IDLE, LANDING, HighLevelPlanner

pytestmark = pytest.mark.realtime("beside")  # vendor client and emulator on the wall clock, little CPU

HL_HEADER = bytes([(p.PORT_HIGH_LEVEL << 4) | 0x0C])


# --- the high-level commander's planner (no link) ----------------------------------------------------------------
def _takeoff(height: float, duration: float, yaw: float = 0.0) -> bytes:
    return struct.pack("<BBff?f", p.HL_TAKEOFF_2, 0, height, yaw, False, duration)


def test_planner_takeoff_is_a_smooth_7th_order_rise_from_the_state_estimate() -> None:
    planner = HighLevelPlanner()
    start = np.array([0.2, -0.1, 0.05])
    assert planner.goal(0.0, start, np.zeros(3), 0.3) is None  # idle on the ground: motors off
    assert planner.handle(_takeoff(1.0, 2.0, yaw=0.5), 0.0)[3] == 0 and planner.state == FLYING
    begin, mid, end = (planner.goal(t, start, np.zeros(3), 0.0) for t in (0.0, 1.0, 2.5))
    assert begin is not None and mid is not None and end is not None
    np.testing.assert_allclose(begin.position, start, atol=1e-9)
    np.testing.assert_allclose(begin.velocity, 0.0, atol=1e-9)
    np.testing.assert_allclose(mid.position, [0.2, -0.1, 0.525], atol=1e-9)  # symmetric: halfway at half time
    assert mid.velocity[2] == pytest.approx(0.95 * 35 / 32 * 1.0, rel=1e-6)  # peak of 35/16 * s(0.5)' / T
    np.testing.assert_allclose(end.position, [0.2, -0.1, 1.0], atol=1e-9)
    assert end.yaw == pytest.approx(0.5) and begin.yaw == pytest.approx(0.3)
    assert planner.handle(_takeoff(1.0, 2.0), 3.0)[3] == 1  # plan_takeoff refuses unless idle
    assert planner.finished(2.0) and not planner.finished(1.9)


def test_planner_go_to_land_stop_and_refusals() -> None:
    planner = HighLevelPlanner()
    here = np.array([0.0, 0.0, 0.5])
    planner.goal(0.0, here, np.zeros(3), 0.0)
    go = struct.pack("<BBBBfffff", p.HL_GO_TO_2, 0, 1, 0, 0.3, 0.0, 0.0, math.pi, 1.0)  # relative
    assert planner.handle(go, 0.0)[3] == 0 and planner.state == FLYING  # go_to from idle takes off
    goal = planner.goal(1.0, here, np.zeros(3), 0.0)
    assert goal is not None
    np.testing.assert_allclose(goal.position, [0.3, 0.0, 0.5], atol=1e-9)
    bad = struct.pack("<BBBBfffff", p.HL_GO_TO_2, 0, 0, 0, math.nan, 0.0, 0.5, 0.0, 1.0)
    assert planner.handle(bad, 1.0)[3] == 22 and planner.state == FLYING  # EINVAL, plan unchanged
    assert planner.handle(struct.pack("<BBff?f", p.HL_LAND_2, 0, 0.0, 0.0, True, 1.0), 1.0)[3] == 0
    assert planner.state == LANDING
    assert planner.handle(struct.pack("<BBff?f", p.HL_LAND_2, 0, 0.0, 0.0, True, 1.0), 1.1)[3] == 1
    assert planner.goal(2.01, here, np.zeros(3), 0.0) is None and planner.state == IDLE  # landed: motors off
    assert planner.handle(struct.pack("<BB", p.HL_SET_GROUP_MASK, 0b10), 3.0)[3] == 0
    assert planner.handle(struct.pack("<BBff?f", p.HL_TAKEOFF_2, 0b01, 1.0, 0.0, False, 1.0), 3.0)[3] == 0
    assert planner.state == IDLE  # another group's command
    assert planner.handle(struct.pack("<BBBBBf", 5, 0, 0, 0, 1, 1.0), 3.0)[3] == 8  # trajectories: ENOEXEC


def test_planner_flies_an_uploaded_trajectory_scaled_reversed_and_relative() -> None:
    planner = HighLevelPlanner()
    piece = [0.0, 1.0] + [0.0] * 6  # x = t over 2 s; y = 0; z = 1; yaw = 0
    raw = struct.pack("<33f", *piece, *[0.0] * 8, *([1.0] + [0.0] * 7), *[0.0] * 8, 2.0)
    for addr in range(0, len(raw), 24):  # as cflib writes it: 24-byte chunks
        reply = planner.memory.handle(2, struct.pack("<BI", 0, addr) + raw[addr:addr + 24])
        assert reply == [(2, struct.pack("<BI", 0, addr) + b"\0")]
    assert planner.memory.handle(2, struct.pack("<BI", 0, 4090) + bytes(8))[0][1][-1] == 5  # EIO: past the end
    assert planner.memory.handle(0, bytes([2, 0]))[0][1][2] == 0x12  # cflib's TYPE_TRAJ
    start = np.array([5.0, 0.0, 0.5])
    planner.goal(0.0, start, np.zeros(3), 0.0)
    assert planner.handle(struct.pack("<BBBBBBf", 13, 0, 0, 0, 0, 3, 1.0), 0.0)[3] == 8  # undefined: ENOEXEC
    assert planner.handle(struct.pack("<BBBBIB", 6, 3, 1, 0, 0, 1), 0.0)[3] == 0
    assert planner.handle(struct.pack("<BBBBBBf", 13, 0, 1, 0, 1, 3, 2.0), 0.0)[3] == 0  # relative, reversed, x2
    goals = [planner.goal(t, start, np.zeros(3), 0.0) for t in (0.0, 2.0, 4.0, 5.0)]
    assert all(g is not None for g in goals)
    np.testing.assert_allclose([g.position for g in goals if g is not None],
                               [[5.0, 0.0, 0.5], [4.0, 0.0, 0.5], [3.0, 0.0, 0.5], [3.0, 0.0, 0.5]], atol=1e-6)
    assert goals[1] is not None and goals[1].velocity[0] == pytest.approx(-0.5)  # reversed, half speed
    assert not planner.finished(3.9) and planner.finished(4.0)


def test_streamed_setpoints_preempt_the_high_level_commander_until_notify_stop() -> None:
    now = [100.0]
    fw = CrazyflieFirmware(lambda: now[0])
    here = np.array([0.0, 0.0, 0.5])
    fw.high_level_step(now[0], here, np.zeros(3), 0.0)
    assert fw.setpoint is not None and fw.setpoint.kind == "stop" and fw.priority == PRIORITY_HIGH_LEVEL
    fw.handle(HL_HEADER + _takeoff(1.0, 1.0))
    fw.high_level_step(now[0], here, np.zeros(3), 0.0)
    assert fw.setpoint.kind == "full_state" and fw.high_level_bits(now[0]) & p.SUP_HL_ACTIVE
    fw.handle(bytes([0x7C]) + struct.pack("<Bffff", p.TYPE_POSITION, 1.0, 2.0, 0.7, 0.0))
    fw.high_level_step(now[0], here, np.zeros(3), 0.0)
    assert fw.setpoint.kind == "position" and fw.priority == PRIORITY_CRTP and fw.planner.state == IDLE
    assert fw.high_level_bits(now[0]) & p.SUP_HL_ACTIVE == 0
    fw.handle(HL_HEADER + struct.pack("<BBBBfffff", p.HL_GO_TO_2, 0, 0, 0, 0.0, 0.0, 0.5, 0.0, 1.0))
    fw.high_level_step(now[0], here, np.zeros(3), 0.0)
    assert fw.setpoint.kind == "position"  # planned, but the streamed setpoint keeps priority
    fw.handle(bytes([0x7D]) + struct.pack("<BI", 0, 300))  # notify setpoint stop, valid 0.3 s more
    assert now[0] - fw.setpoint.stamp == pytest.approx(1.7)  # expires 0.3 s before the 2 s watchdog
    fw.high_level_step(now[0], here, np.zeros(3), 0.0)
    assert fw.setpoint.kind == "full_state" and fw.priority == PRIORITY_HIGH_LEVEL  # handed back at once
    fw.handle(bytes([0x7C]) + struct.pack("<B", p.TYPE_STOP))
    fw.handle(bytes([0x7D]) + struct.pack("<BI", 0, 0))  # cflib MotionCommander.land: stop, then notify
    fw.high_level_step(now[0] + 0.01, here, np.zeros(3), 0.0)
    assert fw.setpoint.kind == "stop" and fw.setpoint.stamp == now[0] + 0.01  # fresh: no watchdog timeout
    fw.params["commander.enHighLevel"] = 0
    assert fw.high_level_bits(now[0]) == p.SUP_HL_DISABLED


def test_attitude_log_variables_use_the_firmware_conventions() -> None:
    vehicle = EmulatedCrazyflie(start_yaw=math.radians(40.0))
    nose_up = np.array([math.cos(-0.1), 0.0, math.sin(-0.1), 0.0])  # -0.2 rad about y: nose up
    vehicle.sim.data.qpos[3:7] = nose_up
    values = vehicle.log_values()
    assert values["stabilizer.pitch"] == pytest.approx(math.degrees(0.2), abs=1e-6)  # legacy: nose up > 0
    assert values["stabilizer.roll"] == pytest.approx(0.0, abs=1e-6)
    assert values["stateEstimate.pitch"] == values["stabilizer.pitch"]
    fw = vehicle.firmware
    fw.handle(bytes([0x2C | 2]) + struct.pack("<HB", fw.param_names.index("kalman.resetEstimation"), 1))
    assert fw.estimator_resets == 1 and fw.params["kalman.resetEstimation"] == 0


# --- unmodified cflib against the emulator -------------------------------------------------------------------------
@dataclass
class Emulator:
    vehicle: EmulatedCrazyflie
    uri: str
    log: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def position(self) -> np.ndarray:
        return np.array(self.vehicle.sim.data.qpos[:3], dtype=float)

    def record(self, timestamp: int, data: dict[str, float], _conf: Any) -> None:
        """A cflib log callback: keep (arrival time, values)."""
        self.log.append((time.monotonic(), dict(data)))

    def logged(self, since: float, until: float, name: str) -> np.ndarray:
        return np.array([d[name] for t, d in self.log if since <= t <= until and name in d])


def _start(start_yaw: float = 0.0) -> tuple[CrazyflieUdpServer, threading.Thread, Emulator]:
    from robot_rl.hardware.crazyflie_link import init_drivers

    init_drivers()  # cflib.crtp.init_drivers, once per process
    vehicle = EmulatedCrazyflie(start_yaw=start_yaw)
    server = CrazyflieUdpServer(vehicle, port=free_udp_port())
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    return server, thread, Emulator(vehicle, f"udp://127.0.0.1:{server.address[1]}")


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    server, thread, emu = _start()
    yield emu
    server.stop()
    thread.join(2.0)
    server.close()


def _connect(uri: str, cache: Any) -> Any:
    from cflib.crazyflie import Crazyflie
    from cflib.crazyflie.syncCrazyflie import SyncCrazyflie

    return SyncCrazyflie(uri, cf=Crazyflie(rw_cache=str(cache)))


def _position_log(scf: Any, emu: Emulator) -> Any:
    from cflib.crazyflie.log import LogConfig

    logconf = LogConfig(name="Position", period_in_ms=10)
    for axis in "xyz":
        logconf.add_variable(f"stateEstimate.{axis}", "float")
    logconf.add_variable("stabilizer.yaw", "float")
    scf.cf.log.add_config(logconf)
    logconf.data_received_cb.add_callback(emu.record)
    return logconf


def _assert_landed_and_off(emu: Emulator) -> None:
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and (np.any(emu.vehicle.thrusts) or emu.position()[2] > 0.08):
        time.sleep(0.02)
    assert emu.position()[2] < 0.08 and not np.any(emu.vehicle.thrusts), (emu.position(), emu.vehicle.thrusts)
    assert emu.vehicle.state != "locked", emu.vehicle.lock_reason


@pytest.mark.slow
def test_motion_commander_takes_off_holds_moves_forward_and_lands(emulator: Emulator, tmp_path: Any) -> None:
    from cflib.positioning.motion_commander import MotionCommander

    deck_attached = threading.Event()
    with _connect(emulator.uri, tmp_path) as scf:
        scf.cf.param.add_update_callback(group="deck", name="bcFlow2",
                                         cb=lambda _, value: deck_attached.set() if int(value) else None)
        logconf = _position_log(scf, emulator)
        assert deck_attached.wait(timeout=5), "No flow deck detected!"
        scf.cf.supervisor.send_arming_request(True)
        time.sleep(1.0)
        logconf.start()
        with MotionCommander(scf, default_height=0.5) as mc:
            time.sleep(1)  # the examples' pause after take-off: the climb's lag settles
            t0 = time.monotonic()
            time.sleep(1)
            hold = emulator.logged(t0, time.monotonic(), "stateEstimate.z")
            mc.forward(0.3)
            time.sleep(1)
            t2 = time.monotonic()
            moved = emulator.logged(t2 - 0.3, t2, "stateEstimate.x")
            truth = emulator.position()
            mc.turn_left(90)
            time.sleep(1)
            t3 = time.monotonic()
            turned = emulator.logged(t3 - 0.3, t3, "stabilizer.yaw")
        logconf.stop()
        _assert_landed_and_off(emulator)
    assert emulator.vehicle.firmware.estimator_resets == 1  # MotionCommander's kalman.resetEstimation
    print(f"\nMotionCommander: hold z mean error {1000 * (hold.mean() - 0.5):+.1f} mm "
          f"(max |e| {1000 * np.abs(hold - 0.5).max():.1f} mm, {len(hold)} samples); "
          f"forward x {1000 * (moved.mean() - 0.3):+.1f} mm from 0.3 m; truth {np.round(truth, 3)}; "
          f"turn_left(90): yaw {turned.mean():.1f} deg")
    assert len(hold) > 50 and abs(hold.mean() - 0.5) < 0.03 and np.abs(hold - 0.5).max() < 0.05
    assert abs(moved.mean() - 0.3) < 0.05 and abs(truth[0] - 0.3) < 0.05 and abs(truth[1]) < 0.05
    assert abs(truth[2] - 0.5) < 0.05 and abs(turned.mean() - 90.0) < 5.0


@pytest.mark.slow
def test_position_hl_commander_goes_to_a_point(emulator: Emulator, tmp_path: Any) -> None:
    from cflib.positioning.position_hl_commander import PositionHlCommander

    with _connect(emulator.uri, tmp_path) as scf:
        scf.wait_for_params()
        scf.cf.supervisor.send_arming_request(True)
        time.sleep(1.0)
        with PositionHlCommander(scf, default_velocity=0.5, default_height=0.5,
                                 controller=PositionHlCommander.CONTROLLER_PID) as pc:
            pc.go_to(0.3, 0.2)
            time.sleep(1.0)  # the trajectory ends when go_to returns; let the controller settle
            reached = emulator.position()
            assert scf.cf.supervisor.is_flying and scf.cf.supervisor.hl_control_active
            pc.go_to(0.0, 0.2, 0.7)
            time.sleep(1.0)
            second = emulator.position()
        _assert_landed_and_off(emulator)
        assert emulator.vehicle.firmware.params["stabilizer.controller"] == 1
    error = reached - [0.3, 0.2, 0.5]
    print(f"\nPositionHlCommander: go_to (0.3, 0.2, 0.5) error {np.round(1000 * error, 1)} mm; "
          f"(0, 0.2, 0.7) error {np.round(1000 * (second - [0.0, 0.2, 0.7]), 1)} mm")
    assert np.linalg.norm(error) < 0.05 and np.linalg.norm(second - [0.0, 0.2, 0.7]) < 0.05


SQUARE_CORNER = ((0.0, 0.0), (0.3, 0.0), (0.3, 0.3))
"""The uploaded trajectory's waypoints (x, y) [m]: two rest-to-rest pieces of 1.5 s each."""


def _rest_to_rest_piece(a: float, b: float, duration: float) -> list[float]:
    """The 8 coefficients of a 7th-order rest-to-rest move (smoothstep 35t^4 - 84t^5 + 70t^6 - 20t^7)."""
    step = (0.0, 0.0, 0.0, 0.0, 35.0, -84.0, 70.0, -20.0)
    return [a + (b - a) * step[0]] + [(b - a) * c / duration ** k for k, c in enumerate(step) if k > 0]


def _upload_trajectory(cf: Any, trajectory_id: int, z: float, yaw: float) -> float:
    """As autonomous_sequence_high_level.py's upload_trajectory, with our own pieces (no figure-8 table)."""
    from cflib.crazyflie.mem import MemoryElement, Poly4D

    trajectory_mem = cf.mem.get_mems(MemoryElement.TYPE_TRAJ)[0]
    trajectory_mem.trajectory = []
    total_duration = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(SQUARE_CORNER):
        duration = 1.5
        trajectory_mem.trajectory.append(Poly4D(
            duration, Poly4D.Poly(_rest_to_rest_piece(x0, x1, duration)),
            Poly4D.Poly(_rest_to_rest_piece(y0, y1, duration)), Poly4D.Poly([z] + [0.0] * 7),
            Poly4D.Poly([yaw] + [0.0] * 7)))
        total_duration += duration
    assert trajectory_mem.write_data_sync(), "Upload failed"
    cf.high_level_commander.define_trajectory(trajectory_id, 0, len(trajectory_mem.trajectory))
    return total_duration


@pytest.mark.slow
def test_high_level_commander_sequence_with_an_uploaded_trajectory(emulator: Emulator, tmp_path: Any) -> None:
    """autonomous_sequence_high_level.py: upload, reset_estimator, arm, take off, (go_to), trajectory, land."""
    from cflib.utils.reset_estimator import reset_estimator

    with _connect(emulator.uri, tmp_path) as scf:
        cf = scf.cf
        logconf = _position_log(scf, emulator)
        duration = _upload_trajectory(cf, 1, z=0.0, yaw=math.pi / 2)
        started = time.monotonic()
        reset_estimator(cf)  # waits for kalman.varPX/PY/PZ to settle (ten 500 ms samples)
        reset_s = time.monotonic() - started
        commander = cf.high_level_commander
        cf.supervisor.send_arming_request(True)
        time.sleep(1.0)
        logconf.start()
        commander.takeoff(0.5, 1.5)
        time.sleep(2.0)
        took_off = emulator.position()
        assert cf.supervisor.hl_control_active and cf.supervisor.hl_traj_finished
        commander.go_to(0.3, -0.2, 0.6, math.pi / 2, 2.0)
        time.sleep(2.5)
        t = time.monotonic()
        went = emulator.position()
        yaw = emulator.logged(t - 0.3, t, "stabilizer.yaw")
        commander.start_trajectory(1, 1.0, relative_position=True)
        time.sleep(duration / 2)
        corner = emulator.position()
        time.sleep(duration / 2 + 0.5)
        flown = emulator.position()
        commander.land(0.0, 1.5)
        time.sleep(2.0)
        commander.stop()
        logconf.stop()
        _assert_landed_and_off(emulator)
        assert not cf.supervisor.hl_control_active  # stopped: the commander keeps the motors off
    corner_error = corner - went - [0.3, 0.0, 0.0]
    flown_error = flown - went - [0.3, 0.3, 0.0]
    print(f"\nHighLevelCommander: reset_estimator {reset_s:.1f} s; takeoff error "
          f"{np.round(1000 * (took_off - [0, 0, 0.5]), 1)} mm; go_to error "
          f"{np.round(1000 * (went - [0.3, -0.2, 0.6]), 1)} mm, yaw {yaw.mean():.1f} deg; uploaded trajectory: "
          f"corner {np.round(1000 * corner_error, 1)} mm, end {np.round(1000 * flown_error, 1)} mm")
    assert emulator.vehicle.firmware.estimator_resets == 1
    assert np.linalg.norm(took_off - [0.0, 0.0, 0.5]) < 0.05
    assert np.linalg.norm(went - [0.3, -0.2, 0.6]) < 0.05 and abs(yaw.mean() - 90.0) < 3.0
    assert np.linalg.norm(corner_error) < 0.06 and np.linalg.norm(flown_error) < 0.05


def test_basic_logging_of_the_stabilizer_attitude(tmp_path: Any) -> None:
    """basiclog.py's LoggingExample: callbacks, a 100 ms block with stabilizer roll / pitch / yaw, FP16 vbat."""
    from cflib.crazyflie import Crazyflie
    from cflib.crazyflie.log import LogConfig

    server, thread, emu = _start(start_yaw=math.radians(30.0))
    cf = Crazyflie(rw_cache=str(tmp_path))
    received: list[tuple[dict[str, float], np.ndarray]] = []
    errors: list[str] = []
    disconnected = threading.Event()

    def on_data(timestamp: int, data: dict[str, float], logconf: Any) -> None:
        received.append((dict(data), np.array(emu.vehicle.sim.data.qpos[:7], dtype=float)))

    def connected(link_uri: str) -> None:
        lg_stab = LogConfig(name="Stabilizer", period_in_ms=100)
        for name in ("stateEstimate.x", "stateEstimate.y", "stateEstimate.z", "stabilizer.roll",
                     "stabilizer.pitch", "stabilizer.yaw"):
            lg_stab.add_variable(name, "float")
        lg_stab.add_variable("pm.vbat", "FP16")
        try:
            cf.log.add_config(lg_stab)
            lg_stab.data_received_cb.add_callback(on_data)
            lg_stab.error_cb.add_callback(lambda conf, msg: errors.append(msg))
            lg_stab.start()
        except (KeyError, AttributeError) as exc:
            errors.append(repr(exc))
        threading.Timer(1.5, cf.close_link).start()

    def connection_failed(link_uri: str, msg: str) -> None:
        errors.append(msg)
        disconnected.set()

    cf.connected.add_callback(connected)
    cf.disconnected.add_callback(lambda uri: disconnected.set())
    cf.connection_failed.add_callback(connection_failed)
    try:
        cf.open_link(emu.uri)
        assert disconnected.wait(15.0)
    finally:
        server.stop()
        thread.join(2.0)
        server.close()
    assert not errors and len(received) >= 8, (errors, len(received))  # 10 Hz for ~1.5 s
    for data, qpos in received:
        rot = quat_to_mat(qpos[3:7])
        assert data["stabilizer.yaw"] == pytest.approx(math.degrees(math.atan2(rot[1, 0], rot[0, 0])), abs=0.1)
        assert data["stabilizer.roll"] == pytest.approx(math.degrees(math.atan2(rot[2, 1], rot[2, 2])), abs=0.1)
        assert data["stabilizer.pitch"] == pytest.approx(math.degrees(math.asin(rot[2, 0])), abs=0.1)
        np.testing.assert_allclose([data[f"stateEstimate.{a}"] for a in "xyz"], qpos[:3], atol=1e-3)
        assert 3.0 < data["pm.vbat"] < 4.2
    assert received[-1][0]["stabilizer.yaw"] == pytest.approx(30.0, abs=0.5)


def test_parameters_are_listed_read_written_and_read_back(emulator: Emulator, tmp_path: Any) -> None:
    """basicparam.py's flow (every group's callback, cpu.flash, pid_attitude.pitch_kd) and sbs_connect_log_param."""
    from cflib.crazyflie import Crazyflie

    cf = Crazyflie(rw_cache=str(tmp_path))
    pending: list[str] = []
    values: dict[str, str] = {}
    read_back = threading.Event()
    fully = threading.Event()

    def param_callback(name: str, value: str) -> None:
        pending.remove(name)
        values[name] = value
        if not pending:  # every value fetched: the example removes its group callbacks
            for group in cf.param.toc.toc:
                cf.param.remove_update_callback(group=group, cb=param_callback)

    def connected(link_uri: str) -> None:
        toc = cf.param.toc.toc
        for group in sorted(toc):
            pending.extend(f"{group}.{name}" for name in sorted(toc[group]))
            cf.param.add_update_callback(group=group, name=None, cb=param_callback)

    cf.connected.add_callback(connected)
    cf.fully_connected.add_callback(lambda uri: fully.set())
    cf.open_link(emulator.uri)
    try:
        assert fully.wait(15.0)
        assert not pending and values["cpu.flash"] == "1024" and values["deck.bcFlow2"] == "1"
        assert float(cf.param.get_value("pid_attitude.pitch_kd")) == 0.0
        cf.param.add_update_callback(group="pid_attitude", name="pitch_kd", cb=lambda n, v: read_back.set())
        cf.param.set_value("pid_attitude.pitch_kd", 0.1234)
        assert read_back.wait(2.0)
        assert float(cf.param.get_value("pid_attitude.pitch_kd")) == pytest.approx(0.1234, abs=1e-6)
        assert emulator.vehicle.firmware.params["pid_attitude.pitch_kd"] == pytest.approx(0.1234, abs=1e-6)
        seen: list[str] = []
        cf.param.add_update_callback(group="stabilizer", name="estimator", cb=lambda n, v: seen.append(v))
        for value in (2, 1):
            cf.param.set_value("stabilizer.estimator", value)
            deadline = time.monotonic() + 2.0
            while str(value) not in seen and time.monotonic() < deadline:
                time.sleep(0.01)
        assert seen == ["2", "1"] and emulator.vehicle.firmware.params["stabilizer.estimator"] == 1
        with pytest.raises(AttributeError, match="read-only"):
            cf.param.set_value("deck.bcFlow2", 0)
    finally:
        cf.close_link()


@pytest.mark.slow
def test_supervisor_states_disarming_and_the_emergency_stop(emulator: Emulator, tmp_path: Any) -> None:
    from cflib.crazyflie.log import LogConfig

    with _connect(emulator.uri, tmp_path) as scf:
        cf = scf.cf
        assert cf.supervisor.read_state_list() == ["Can be armed", "Is armed", "Is auto armed", "Can fly"]
        cf.supervisor.send_arming_request(False)
        time.sleep(0.2)
        assert not cf.supervisor.is_armed
        cf.high_level_commander.takeoff(0.4, 1.0)
        time.sleep(0.5)
        assert emulator.position()[2] < 0.08 and not np.any(emulator.vehicle.thrusts)  # disarmed: no take-off
        cf.supervisor.send_arming_request(True)
        time.sleep(0.5)
        assert cf.supervisor.is_armed and not np.any(emulator.vehicle.thrusts)  # the take-off is not resumed
        motors = LogConfig(name="Motors", period_in_ms=10)
        for i in range(1, 5):
            motors.add_variable(f"motor.m{i}", "uint16_t")
        motors.add_variable("supervisor.info", "uint16_t")
        cf.log.add_config(motors)
        samples: list[tuple[float, dict[str, float]]] = []
        motors.data_received_cb.add_callback(lambda ts, data, _: samples.append((time.monotonic(), dict(data))))
        motors.start()
        cf.high_level_commander.takeoff(0.4, 1.0)
        time.sleep(1.5)
        assert cf.supervisor.is_flying and emulator.position()[2] > 0.3
        assert all(samples[-1][1][f"motor.m{i}"] > 20000 for i in range(1, 5))
        stop_sent = time.monotonic()
        cf.supervisor.send_emergency_stop()
        time.sleep(1.0)
        motors.stop()
        after = [d for t, d in samples if t > stop_sent + 0.1]
        assert after and all(d[f"motor.m{i}"] == 0 for d in after for i in range(1, 5))
        cut = next(t for t, d in samples if t > stop_sent and not any(d[f"motor.m{i}"] for i in range(1, 5)))
        print(f"\nsupervisor: motors logged at zero {1000 * (cut - stop_sent):.0f} ms after the emergency stop")
        assert all(int(d["supervisor.info"]) & p.SUP_IS_LOCKED for d in after)
        assert cf.supervisor.is_locked and emulator.vehicle.state == "locked"
        assert emulator.position()[2] < 0.1  # fell to the floor
        cf.supervisor.send_arming_request(True)
        cf.high_level_commander.takeoff(0.4, 1.0)
        time.sleep(0.5)
        assert not np.any(emulator.vehicle.thrusts) and cf.supervisor.is_locked  # locked until a reboot
