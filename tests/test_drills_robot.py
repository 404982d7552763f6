"""Fault drills on the robot side: a bridge killed mid-run (the robot must fail safe by itself, and a respawned
bridge must take it back without a jump), a camera that stops publishing, and sim-clock jumps.

The bridge drills run the bridge core and the emulator core in this process (the emulator is what the robot
does; killing the bridge process = no further packet from it), so each measures the vehicle's own fail-safe
timing exactly. The emulator kills (the other direction) live in tests/test_hw_*.py, which record the same way.
Every drill calls ``record_fault`` once with what it measured.
"""

from __future__ import annotations

import math
import struct
import threading
import time

import numpy as np
import pytest
from helpers.fuzz import record_fault
from helpers.ports import free_udp_ports

from robot_rl.control.targets import JointTarget
from robot_rl.control.watchdog import Watchdog
from robot_rl.hardware.unitree_bridge import BridgeMode, UnitreeBridge, UnitreeBridgeConfig
from robot_rl.hardware.unitree_emulator import EmulatorConfig, G1Emulator
from robot_rl.robots import g1

pytestmark = pytest.mark.robot_dds  # the Unitree bridge and emulator speak DDS on domain 0

DT = 0.002
FREE_JOINTS = [3, 9, 15, 18, 22, 25]


# ============================================================================ Unitree: unitree_bridge killed
def _tick(bridge: UnitreeBridge, emulator: G1Emulator, now: float, target: JointTarget | None) -> None:
    """One 500 Hz cycle of bridge + robot (the bridge's DDS loop, without DDS)."""
    bridge.on_state(emulator.lowstate(), now)
    if target is not None:
        bridge.submit(target, now)
    image = bridge.tick(now)
    if image is not None:
        emulator.apply(image)
    emulator.step()


def test_unitree_bridge_killed_robot_damps_itself_and_a_respawned_bridge_ramps_in_from_where_it_is() -> None:
    timeout = 0.1
    emulator = G1Emulator(EmulatorConfig(command_timeout_s=timeout))
    bridge = UnitreeBridge(UnitreeBridgeConfig(ramp_time_s=0.2))
    target = g1.STAND_Q.copy()
    target[FREE_JOINTS] += (0.4, 0.3, -0.3, -0.3, 0.2, -0.2)
    now = 0.0
    for _ in range(round(0.6 / DT)):
        _tick(bridge, emulator, now, JointTarget(target))
        now += DT
    assert bridge.mode is BridgeMode.ACTIVE and emulator.command is not None
    # kill -9 of unitree_bridge: rt/lowcmd stops; only the robot is left to act
    steps = 0
    while emulator.command is not None and steps < 1000:
        emulator.step()
        steps += 1
    damped_after = steps * DT
    assert emulator.timed_out and emulator.timeouts == 1
    assert timeout <= damped_after <= timeout + 2 * DT, damped_after  # the robot's own watchdog, to the tick
    dq = emulator.data.qvel[emulator.index.qvel]
    np.testing.assert_allclose(emulator._motor_pd(), np.clip(-emulator.config.idle_kd * dq, -emulator.effort,
                                                             emulator.effort), atol=1e-9)  # damping, not limp
    for _ in range(round(1.0 / DT)):  # the launch file does not respawn the bridge: a second of damping
        emulator.step()
        now += DT
    # the bridge is started again: it ramps its gains in from the pose it measures, never the dead one's target
    measured = emulator.lowstate()["motor_state"]["q"][:29].astype(np.float64)
    fresh = UnitreeBridge(UnitreeBridgeConfig(ramp_time_s=0.2))
    _tick(fresh, emulator, now, None)
    first = fresh.last_command
    assert first is not None and fresh.mode is BridgeMode.RAMPING
    np.testing.assert_allclose(first.q[:29], measured, atol=1e-6)  # no jump: the command is where the robot is
    assert np.all(first.kp[:29] <= 0.02 * fresh.kp + 1e-9)
    assert not emulator.timed_out  # a valid command again: the robot leaves damping
    respawned, speed = now, 0.0
    while fresh.mode is not BridgeMode.HOLD and now < respawned + 2.0:
        now += DT
        _tick(fresh, emulator, now, None)
        speed = max(speed, float(np.abs(emulator.data.qvel[emulator.index.qvel]).max()))
    assert fresh.mode is BridgeMode.HOLD
    recovered = now - respawned
    held = emulator.lowstate()["motor_state"]["q"][:29].astype(np.float64)
    moved = float(np.abs(held - measured).max())
    assert moved < 0.15 and speed < 1.5, (moved, speed)  # settled near the pose it was taken over in
    assert np.abs(held - target)[FREE_JOINTS].max() > 0.1  # ... and not snapped to the dead bridge's target
    record_fault("unitree_bridge: SIGKILL mid-run", happened=f"emulator dropped the last LowCmd after "
                 f"{damped_after:.3f} s (command_timeout_s {timeout}) and damped; respawned bridge ramped gains in "
                 f"from the measured pose (first command = measured q, kp <= 2 %), HOLD after {recovered:.2f} s, "
                 f"max joint move {moved:.3f} rad, max speed {speed:.2f} rad/s", recovery_s=round(recovered, 3),
                 lost="the policy's targets while the bridge was down", robot="damped, then held",
                 damped_after_s=round(damped_after, 4))


# ============================================================================ Crazyflie: crazyflie_bridge killed
def _position_setpoint(z: float) -> bytes:
    """A generic-commander position setpoint (port 7, type 7), as the bridge sends one."""
    return bytes([0x7C]) + struct.pack("<Bffff", 7, 0.0, 0.0, z, 0.0)


@pytest.mark.slow
def test_crazyflie_bridge_killed_firmware_levels_then_stops_and_a_respawned_bridge_cannot_spin_it_up() -> None:
    from robot_rl.hardware import crazyflie_protocol as p
    from robot_rl.hardware.crazyflie_emulator import WDT_LEVEL_S, WDT_SHUTDOWN_S, EmulatedCrazyflie

    vehicle = EmulatedCrazyflie()
    vehicle.firmware.armed = True

    def run(seconds: float, setpoint: bytes | None, until: object = None) -> float:
        """Step the vehicle paced to wall time (its supervisor runs on time.monotonic)."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            if setpoint is not None:
                vehicle.firmware.handle(setpoint)
            vehicle.step(5)
            if callable(until) and until():
                break
            time.sleep(max(0.0, 0.01 - (time.monotonic() - start) % 0.01))
        return time.monotonic() - start

    run(2.0, _position_setpoint(0.5))
    assert vehicle.state == "flying" and vehicle.sim.state().base_pos[2] > 0.3  # type: ignore[index]
    assert vehicle.firmware.setpoint is not None
    killed = vehicle.firmware.setpoint.stamp  # the bridge dies: no setpoint after this one
    run(3.0, None, lambda: vehicle.state == "level_out")
    level_after = time.monotonic() - killed
    assert vehicle.state == "level_out" and WDT_LEVEL_S <= level_after < WDT_LEVEL_S + 0.5, level_after
    run(4.0, None, lambda: vehicle.state == "locked")
    stopped_after = time.monotonic() - killed
    assert vehicle.state == "locked" and "commander watchdog" in vehicle.lock_reason
    assert WDT_SHUTDOWN_S <= stopped_after < WDT_SHUTDOWN_S + 1.0, stopped_after
    assert np.all(vehicle.thrusts == 0) and vehicle.firmware.info_bits & p.SUP_IS_LOCKED
    # a respawned bridge streams setpoints again: the locked firmware keeps the motors off until a reboot
    run(1.0, _position_setpoint(0.5))
    assert vehicle.state == "locked" and np.all(vehicle.thrusts == 0)
    assert vehicle.firmware.info_bits & p.SUP_IS_LOCKED and not vehicle.firmware.info_bits & p.SUP_CAN_FLY
    record_fault("crazyflie_bridge: SIGKILL in flight", happened=f"firmware levelled out after {level_after:.2f} s, "
                 f"cut the motors and locked after {stopped_after:.2f} s (commander watchdog, as supervisor.c); a "
                 "respawned bridge's setpoints are ignored until the vehicle is rebooted (supervisor.info: locked)",
                 recovery_s=None, lost="the flight (motors off from hover height)", robot="levelled, then stopped",
                 level_after_s=round(level_after, 3), stopped_after_s=round(stopped_after, 3))


# ============================================================================ PX4: px4_bridge killed
@pytest.mark.slow
def test_px4_bridge_killed_vehicle_holds_by_itself_and_a_respawned_bridge_takes_over_without_a_jump() -> None:
    from robot_rl.hardware import px4_codec as codec
    from robot_rl.hardware import px4_emulator as pe
    from robot_rl.hardware.px4_link import OffboardSession, Px4Link, SessionConfig

    limits = codec.SetpointLimits()
    vehicle_port, offboard_port = free_udp_ports(2)
    emulator = pe.Px4Emulator(pe.EmulatorConfig(local_port=vehicle_port, remote_port=offboard_port),
                              params={"COM_FAIL_ACT_T": 5.0})  # hold long enough for the respawn to find it holding
    stop = threading.Event()
    thread = threading.Thread(target=emulator.run, args=(stop,), daemon=True)
    thread.start()
    links: list[Px4Link] = []

    def bridge() -> OffboardSession:
        link = Px4Link(f"udpin:127.0.0.1:{offboard_port}")
        links.append(link)
        return OffboardSession(link, SessionConfig(auto_arm=True, prestream_s=0.2), lambda level, text: None)

    def fly(session: OffboardSession, seconds: float, setpoint: object, until: object = None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = time.monotonic()
            if setpoint is not None:
                session.command(setpoint, now)  # type: ignore[arg-type]
            session.tick(now)
            session.link.poll(0.005)
            if callable(until) and until():
                return True
        return False

    def pos() -> np.ndarray:
        return np.asarray(emulator.body().pos, dtype=np.float64).copy()

    try:
        session = bridge()
        climb = codec.velocity_setpoint(np.array([0.0, 0.0, 0.6]), 0.0, limits)
        hold = codec.velocity_setpoint(np.zeros(3), 0.0, limits)
        assert fly(session, 15.0, climb, lambda: emulator.mode == pe.OFFBOARD and emulator.airborne
                   and pos()[2] - emulator.origin[2] > 0.5), emulator.events[-5:]
        fly(session, 0.5, hold)
        links[0].close()  # kill -9 of px4_bridge: no setpoint, no heartbeat from now on
        deadline = time.monotonic() + 5.0
        while emulator.mode == pe.OFFBOARD and time.monotonic() < deadline:
            time.sleep(0.005)
        hold_after = time.monotonic() - emulator.setpoint_times[-1]  # since the last setpoint the vehicle got
        loss = emulator.params["COM_OF_LOSS_T"]
        assert emulator.mode == pe.HOLD and emulator.armed, emulator.events[-5:]
        assert loss <= hold_after <= loss + 0.5, hold_after
        assert "Failsafe activated: no offboard signal, holding" in emulator.events
        time.sleep(0.5)
        held = pos()
        # respawned: it connects and listens, and takes nothing over without a command stream
        session = bridge()
        respawned = time.monotonic()
        assert fly(session, 5.0, None, lambda: session.connected)
        fly(session, 0.5, None)
        assert emulator.mode == pe.HOLD and np.linalg.norm(pos() - held) < 0.1
        # the policy streams again (zero velocity): back in OFFBOARD, holding where it is
        assert fly(session, 5.0, hold, lambda: emulator.mode == pe.OFFBOARD), emulator.events[-5:]
        recovered = time.monotonic() - respawned
        samples = []
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            fly(session, 0.05, hold)
            samples.append(pos())
        drift = float(max(np.linalg.norm(s - held) for s in samples))
        assert emulator.mode == pe.OFFBOARD and emulator.armed and drift < 0.2, drift
    finally:
        stop.set()
        thread.join(5)
        emulator.close()
        for link in links:
            link.close()
    record_fault("px4_bridge: SIGKILL in flight", happened=f"PX4 offboard-loss failsafe switched to Hold after "
                 f"{hold_after:.2f} s (COM_OF_LOSS_T {loss:g} s), armed and in the air; the respawned bridge connected "
                 f"without changing modes and re-entered OFFBOARD on the first command stream, {drift:.3f} m from the "
                 "held position", recovery_s=round(recovered, 3), lost="the commands while the bridge was down",
                 robot="held", hold_after_s=round(hold_after, 3))


# ============================================================================ sim-clock jumps (core)
def test_watchdog_clock_jumps_neither_freshen_a_stale_stream_nor_freeze_the_watchdog() -> None:
    dog = Watchdog(0.2)
    dog.feed(100.0)
    assert not dog.stale(100.1)
    # backwards (the sim was reset, /clock restarts at 0): the last target is from the old timeline
    assert dog.stale(0.0) and dog.stale(99.0) and dog.age(0.0) == math.inf
    assert not dog.stale(99.95)  # a step back within the timeout: still the same stream
    dog.feed(0.0)  # a fresh target on the new timeline re-arms it ...
    assert not dog.stale(0.1) and dog.stale(0.25)  # ... and it runs again: not frozen
    # forwards (a paused sim resumes far ahead): the old target is stale at once; a new one is fresh
    dog.feed(1.0)
    assert dog.stale(1000.0)
    dog.feed(1000.0)
    assert not dog.stale(1000.1) and dog.stale(1000.3)


def test_safety_layer_holds_on_a_backward_and_a_forward_sim_clock_jump() -> None:
    import mujoco

    from robot_rl.control import SafetyLayer, SafetyMode, build_controller
    from robot_rl.control.stepping import StateIndex
    from robot_rl.robots import panda

    m = panda.load_model(timestep=DT)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    index = StateIndex.from_model(m, panda.JOINT_NAMES)
    c = build_controller("panda", m, d)
    assert isinstance(c, SafetyLayer)
    state = index.read(d, copy=True)
    c.reset(state)
    timeout = c.config.watchdog_timeout
    outcomes = {}
    for label, jump in (("backward", -100.0), ("forward", +100.0)):
        t0 = 200.0
        c.set_target(c.current_target(), t0)
        c.compute(state, t0)
        assert c.mode in (SafetyMode.ACTIVE, SafetyMode.BLENDING), (label, c.mode)
        c.compute(state, t0 + jump)  # /clock jumps; no new target
        assert c.mode == SafetyMode.HOLD and "stale target" in c.status.reason, (label, c.status)
        outcomes[label] = c.status.reason
        # not frozen: a new target on the new timeline is followed, and goes stale again after the timeout
        c.set_target(c.current_target(), t0 + jump)
        c.compute(state, t0 + jump + timeout / 2)
        assert c.mode in (SafetyMode.ACTIVE, SafetyMode.BLENDING), (label, c.mode)
        c.compute(state, t0 + jump + timeout * 1.5)
        assert c.mode == SafetyMode.HOLD
    record_fault("sim clock jump (use_sim_time)", happened="a backward jump (> timeout) or a forward jump makes the "
                 "last target stale at the next tick (hold); a new target on the new timeline is followed and "
                 "watched again (the watchdog does not freeze)", recovery_s=0.0, lost="nothing", robot="held",
                 reasons=outcomes)




# ============================================================================ a camera stops publishing
def test_a_silent_camera_stops_the_policys_observation_and_frames_coming_back_resume_it() -> None:
    rclpy = pytest.importorskip("rclpy")
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from robot_rl.ros.conversions import image_to_msg
    from robot_rl.ros.observation_sources import ObservationSources

    timeout = 0.3
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("camera_drill", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        sources = ObservationSources(node, ["image_front"], "panda", {"image_front": (24, 24, 3)}, {},
                                     camera_timeout_s=timeout)
        camera = node.create_publisher(Image, "/front/image_raw", qos_profile_sensor_data)
        frames = iter(range(10**6))

        def spin(seconds: float, publish: bool, until: object) -> float | None:
            """Spin (a 30 Hz camera when ``publish``) until ``until()``; seconds it took, None on timeout."""
            start = next_frame = time.monotonic()
            while time.monotonic() - start < seconds:
                if publish and time.monotonic() >= next_frame:
                    frame = np.full((24, 24, 3), next(frames) % 255, np.uint8)
                    camera.publish(image_to_msg(frame, time.monotonic_ns(), "front"))
                    next_frame += 1 / 30
                executor.spin_once(timeout_sec=0.005)
                if callable(until) and until():
                    return time.monotonic() - start
            return None

        assert spin(10.0, True, lambda: sources.observation() is not None) is not None
        spin(0.3, True, None)
        assert sources.observation() is not None and not sources.stale_cameras()
        last = sources.camera_inputs["image_front"].received
        assert last is not None
        assert spin(5.0, False, lambda: sources.observation() is None) is not None  # the camera went silent
        stopped_after = time.monotonic() - last
        assert timeout <= stopped_after <= timeout + 0.5, stopped_after  # not before, and promptly after
        assert list(sources.stale_cameras()) == ["image_front"]
        resumed_after = spin(10.0, True, lambda: sources.observation() is not None)  # frames return
        assert resumed_after is not None and not sources.stale_cameras()
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
    record_fault("camera stops publishing", happened=f"the policy's observation was withheld {stopped_after:.2f} s "
                 f"after the last frame (camera_timeout_s {timeout}): the policy node publishes nothing and logs "
                 f"'holding: image_front silent', the controller's watchdog holds; acting resumed "
                 f"{resumed_after:.2f} s after frames returned", recovery_s=round(resumed_after, 3),
                 lost="the actions while the camera was silent", robot="held",
                 stopped_after_s=round(stopped_after, 3))
