"""An emulated PX4 multirotor: our MuJoCo Crazyflie behind PX4's MAVLink 2 offboard interface, over UDP.

Plays PX4 SITL's offboard link (``mavlink start -u 14580 -o 14540 -m onboard``): it listens on a local UDP port
and sends to the offboard API port, MAVLink 2, system 1, component 1. Behind it the cf2x model
(:mod:`robot_rl.robots.cf2x`) flies under :class:`~robot_rl.control.quadrotor.QuadrotorController` standing in
for PX4's rate and velocity/position controllers, paced to wall time.

Emulated, modelled on PX4 v1.14/1.15 (not checked against a real PX4 or SITL here): HEARTBEAT with the PX4
custom main/sub mode and the armed flag; COMMAND_ACK for every COMMAND_LONG (ARM_DISARM with the 21196 force
magic, DO_SET_MODE with PX4 custom modes, SET_MESSAGE_INTERVAL, NAV_LAND; others UNSUPPORTED); OFFBOARD entry
refused (TEMPORARILY_REJECTED) unless setpoints stream at > 2 Hz; the offboard-loss failsafe: no setpoint for
``COM_OF_LOSS_T`` -> Hold (AUTO_LOITER) for ``COM_FAIL_ACT_T``, then Land (AUTO_LAND, ``MPC_LAND_SPEED``), then
auto-disarm after ``COM_DISARM_LAND``; STATUSTEXT for each; normalised thrust through ``MPC_THR_HOVER``;
parameters by name (PARAM_REQUEST_READ / PARAM_SET); telemetry ATTITUDE_QUATERNION, LOCAL_POSITION_NED,
HIGHRES_IMU, EXTENDED_SYS_STATE in NED/FRD at requested intervals.

Not emulated: the EKF (telemetry is the true state, local origin = the start point), RC and manual modes,
missions, takeoff and RTL, attitude setpoints (only body rates + thrust), acceleration setpoints, the
pre-flight checks beyond "armed only in OFFBOARD with a live stream" (no RC, mission or takeoff here, so no
other mode could fly it), PX4's land detector beyond a height/speed test, TIMESYNC, MAVLink signing.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import select
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.control.base import RobotState
from robot_rl.control.config import build_controller
from robot_rl.control.quadrotor import QuadrotorController
from robot_rl.control.rotations import quat_to_mat, quat_yaw
from robot_rl.control.stepping import StateIndex
from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware.px4_codec import (
    FORCE_MAGIC,
    HOLD,
    LAND,
    MAIN_AUTO,
    MAIN_OFFBOARD,
    OFFBOARD,
    SUB_LAND,
    SUB_LOITER,
    PositionSetpoint,
    RatesSetpoint,
    Setpoint,
    SetpointRefused,
    ThrustMap,
    decode_setpoint,
    enu_to_ned,
    flu_to_frd,
    frd_to_flu,
    mode_name,
    ned_to_enu,
    quat_enu_to_ned,
    yaw_ned_to_enu,
)
from robot_rl.robots import actuator_indices, cf2x, description
from robot_rl.sim.backend import MujocoBackend

log = logging.getLogger("px4_emulator")
DEFAULT_PARAMS = {
    "COM_OF_LOSS_T": 0.5, "COM_FAIL_ACT_T": 1.0, "MPC_LAND_SPEED": 0.5, "COM_DISARM_LAND": 0.5,
    "MPC_THR_HOVER": cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX),
}
"""PX4 parameters the emulator honours (values suit the 27 g cf2x; PX4's own defaults are 1.0 s, 5 s, 0.7 m/s, 2 s)."""
DEFAULT_RATES = {mavlink.MAVLINK_MSG_ID_HEARTBEAT: 1.0, mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION: 50.0,
                 mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED: 30.0, mavlink.MAVLINK_MSG_ID_HIGHRES_IMU: 50.0,
                 mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE: 5.0}
"""Stream rates [Hz] before any SET_MESSAGE_INTERVAL (roughly PX4's onboard-link defaults)."""
_ON_GROUND, _IN_AIR, _LANDING = (mavlink.MAV_LANDED_STATE_ON_GROUND, mavlink.MAV_LANDED_STATE_IN_AIR,
                                 mavlink.MAV_LANDED_STATE_LANDING)
_ACCEPTED, _REJECTED = mavlink.MAV_RESULT_ACCEPTED, mavlink.MAV_RESULT_TEMPORARILY_REJECTED


@dataclass(frozen=True)
class EmulatorConfig:
    """Where the emulated vehicle listens and sends, and how fast it runs."""

    local_port: int = 14580
    """UDP port the vehicle receives on (PX4 SITL's offboard instance: 14580)."""
    remote_host: str = "127.0.0.1"
    """Host of the offboard API."""
    remote_port: int = 14540
    """Port the vehicle sends to (PX4's offboard API port: 14540)."""
    system_id: int = 1
    """MAVLink system id of the vehicle (PX4 ``MAV_SYS_ID``)."""
    physics_hz: float = 500.0
    """Physics and inner-loop rate [Hz]."""
    tick_hz: float = 250.0
    """How often setpoints are applied, the physics caught up with wall time and telemetry sent [Hz]."""

    def __post_init__(self) -> None:
        if not 0 < self.local_port < 65536 or not 0 < self.remote_port < 65536:
            raise ValueError("ports must be in 1..65535")
        if not 50 <= self.physics_hz <= 5000 or not 10 <= self.tick_hz <= self.physics_hz:
            raise ValueError("physics_hz must be in [50, 5000] and tick_hz in [10, physics_hz]")


@dataclass(frozen=True)
class Body:
    """The vehicle's true state: position [m] and quaternion (w, x, y, z) in ENU, world velocity, FLU body rates."""

    pos: np.ndarray
    quat: np.ndarray
    linvel: np.ndarray
    angvel: np.ndarray


class Px4Emulator:
    """The vehicle: MAVLink in, PX4 mode logic, MuJoCo physics, MAVLink telemetry out."""

    def __init__(self, config: EmulatorConfig, params: dict[str, float] | None = None) -> None:
        self.config = config
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        desc = description(cf2x.NAME)
        model = desc.build_scene(False).compile()
        model.opt.timestep = 1.0 / config.physics_hz
        self.backend = MujocoBackend(model)
        self.index = StateIndex.from_model(model, (), desc.base.joint if desc.base else None)
        self.actuators = actuator_indices(model, desc.actuators)
        controller = build_controller(cf2x.NAME, safety=False)
        assert isinstance(controller, QuadrotorController)
        self.controller = controller
        self.armed = False
        qpos = desc.home_qpos(model)
        qpos[2] = 0.065  # resting on its legs
        self.backend.reset(qpos, np.zeros(model.nv))
        self.backend.step(int(0.3 * config.physics_hz), self.actuators, self._control)  # settle on the floor
        self.controller.warm_up(self.index.read(self.backend.data))  # load the compiled law now, not when armed
        self.origin = self.body().pos.copy()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", config.local_port))
        self.sock.setblocking(False)
        self.remote = (config.remote_host, config.remote_port)
        self.mav = mavlink.MAVLink(self, srcSystem=config.system_id, srcComponent=mavlink.MAV_COMP_ID_AUTOPILOT1)
        self.mav.robust_parsing = True
        self.mode = HOLD
        self.setpoint: Setpoint | None = None
        self.setpoint_times: deque[float] = deque(maxlen=64)
        self.failsafe_since: float | None = None
        self.landed_since: float | None = None
        self.intervals = {k: 1.0 / v for k, v in DEFAULT_RATES.items()}
        self._next_send = dict.fromkeys(self.intervals, 0.0)
        self._carrot = self.origin.copy()
        self._carrot_yaw = 0.0
        self._wall0 = self._last_update = time.monotonic()
        self._sim0 = self.backend.time
        self.events: list[str] = []
        """Every mode/arming event, as logged (tests read it for in-process runs)."""

    # --- io --------------------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Pymavlink's file: one datagram to the offboard API port (dropped when nobody listens)."""
        with contextlib.suppress(OSError):
            self.sock.sendto(data, self.remote)

    def _event(self, text: str, severity: int = mavlink.MAV_SEVERITY_INFO) -> None:
        log.info(text)
        self.events.append(text)
        self.mav.statustext_send(severity, text.encode()[:50])

    def time_ms(self, now: float) -> int:
        """time_boot_ms of a message sent at ``now``."""
        return int((now - self._wall0) * 1000)

    # --- state -----------------------------------------------------------------------------------------------
    def state(self) -> RobotState:
        """The true RobotState (world = ENU, body FLU)."""
        return self.index.read(self.backend.data, copy=True)

    def body(self) -> Body:
        """The true floating-base state, ENU world / FLU body."""
        s = self.state()
        assert s.base_pos is not None and s.base_quat is not None
        assert s.base_linvel is not None and s.base_angvel is not None
        return Body(s.base_pos, s.base_quat, s.base_linvel, s.base_angvel)

    def _stream_alive(self, now: float) -> bool:
        """PX4's offboard-signal check: setpoints at > 2 Hz, the newest younger than COM_OF_LOSS_T."""
        recent = [t for t in self.setpoint_times if now - t <= 1.0]
        return len(recent) >= 2 and now - recent[-1] <= self.params["COM_OF_LOSS_T"]

    def _landed(self) -> bool:
        s = self.body()
        return bool(s.pos[2] - self.origin[2] < 0.03 and abs(s.linvel[2]) < 0.1)

    def _set_mode(self, mode: int, why: str) -> None:
        if mode != self.mode:
            self.mode = mode
            self._event(f"mode {mode_name(mode)}: {why}")
            s = self.body()
            self._carrot, self._carrot_yaw = s.pos.copy(), quat_yaw(s.quat)
            if mode == OFFBOARD:
                self.failsafe_since = None

    def _disarm(self, why: str) -> None:
        if self.armed:
            self.armed = False
            self._event(f"Disarmed: {why}", mavlink.MAV_SEVERITY_WARNING)

    # --- commands --------------------------------------------------------------------------------------------
    def _handle(self, msg: mavlink.MAVLink_message, now: float) -> None:
        kind = msg.get_type()
        if kind in ("SET_ATTITUDE_TARGET", "SET_POSITION_TARGET_LOCAL_NED"):
            if msg.target_system not in (0, self.config.system_id):
                return
            try:
                self.setpoint = decode_setpoint(msg)
            except SetpointRefused as exc:
                log.warning("ignored setpoint: %s", exc)
                return
            self.setpoint_times.append(now)
        elif kind == "COMMAND_LONG" and msg.target_system in (0, self.config.system_id):
            result = self._command(msg, now)
            self.mav.command_ack_send(msg.command, result, 0, 0, msg.get_srcSystem(), msg.get_srcComponent())
        elif kind in ("PARAM_REQUEST_READ", "PARAM_SET", "PARAM_REQUEST_LIST"):
            self._param(msg)

    def _command(self, msg: mavlink.MAVLink_message, now: float) -> int:
        cmd = msg.command
        if cmd == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            force = abs(msg.param2 - FORCE_MAGIC) < 0.5
            if msg.param1 > 0.5:
                if self.armed:
                    return _ACCEPTED
                if self.mode != OFFBOARD or not self._stream_alive(now):
                    self._event("Arming denied: switch to Offboard with a setpoint stream first",
                                mavlink.MAV_SEVERITY_CRITICAL)
                    return _REJECTED
                self.armed, self.landed_since = True, None
                self.controller.reset(self.state())
                b = self.body()
                self._carrot, self._carrot_yaw = b.pos.copy(), quat_yaw(b.quat)
                self._event("Armed by external command")
                return _ACCEPTED
            if not self.armed:
                return _ACCEPTED
            if not force and not self._landed():
                self._event("Disarming denied: not landed", mavlink.MAV_SEVERITY_CRITICAL)
                return _REJECTED
            self._disarm("forced by external command (motors stopped)" if force else "external command")
            return _ACCEPTED
        if cmd == mavlink.MAV_CMD_DO_SET_MODE:
            main, sub = int(msg.param2), int(msg.param3)
            if not int(msg.param1) & mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED:
                return mavlink.MAV_RESULT_DENIED
            if main == MAIN_OFFBOARD:
                if not self._stream_alive(now):
                    self._event("Switching to Offboard is currently not available", mavlink.MAV_SEVERITY_CRITICAL)
                    return _REJECTED
                self._set_mode(OFFBOARD, "external command")
                return _ACCEPTED
            if main == MAIN_AUTO and sub in (SUB_LOITER, SUB_LAND):
                self.failsafe_since = None
                self._set_mode(HOLD if sub == SUB_LOITER else LAND, "external command")
                return _ACCEPTED
            self._event(f"Switching to mode {main}/{sub} is not available (no RC)", mavlink.MAV_SEVERITY_CRITICAL)
            return _REJECTED
        if cmd == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL:
            msg_id, interval = int(msg.param1), msg.param2
            if msg_id not in DEFAULT_RATES:
                return mavlink.MAV_RESULT_DENIED
            self.intervals[msg_id] = (1.0 / DEFAULT_RATES[msg_id] if interval == 0 else
                                      np.inf if interval < 0 else max(interval * 1e-6, 1.0 / self.config.tick_hz))
            self._next_send[msg_id] = now
            return _ACCEPTED
        if cmd == mavlink.MAV_CMD_NAV_LAND:
            if not self.armed:
                return _REJECTED
            self.failsafe_since = None
            self._set_mode(LAND, "external command")
            return _ACCEPTED
        return mavlink.MAV_RESULT_UNSUPPORTED

    def _param(self, msg: mavlink.MAVLink_message) -> None:
        names = list(self.params)
        kind = msg.get_type()
        if kind == "PARAM_REQUEST_LIST":
            wanted = names
        else:
            name = msg.param_id
            if name not in self.params:
                return  # PX4 stays silent about unknown names
            if kind == "PARAM_SET":
                self.params[name] = float(msg.param_value)
                self._event(f"param {name} = {self.params[name]:g}")
            wanted = [name]
        for name in wanted:
            self.mav.param_value_send(name.encode(), self.params[name], mavlink.MAV_PARAM_TYPE_REAL32, len(names),
                                      names.index(name))

    # --- control ---------------------------------------------------------------------------------------------
    def _control(self) -> np.ndarray:
        if not self.armed:
            return cf2x.rotor_commands(np.zeros(4))
        return cf2x.rotor_commands(self.controller.compute(self.index.read(self.backend.data), self.backend.time))

    def _failsafe(self, now: float) -> None:
        p = self.params
        if self.mode == OFFBOARD and not self._stream_alive(now):
            if self.armed:
                self.failsafe_since = now
                self._event("Failsafe activated: no offboard signal, holding", mavlink.MAV_SEVERITY_CRITICAL)
            self._set_mode(HOLD, "offboard signal lost")
        if self.failsafe_since is not None and self.mode == HOLD and now - self.failsafe_since >= p["COM_FAIL_ACT_T"]:
            self._set_mode(LAND, "failsafe action after COM_FAIL_ACT_T")
        if self.armed and self.mode == LAND and self._landed():
            self.landed_since = now if self.landed_since is None else self.landed_since
            if now - self.landed_since >= p["COM_DISARM_LAND"]:
                self._disarm("auto disarm on land")
                self.failsafe_since = None
                self._set_mode(HOLD, "landed")
        else:
            self.landed_since = None

    def _apply_setpoint(self, dt: float) -> None:
        s, t = self.body(), self.backend.time
        ctl = self.controller
        if self.mode == OFFBOARD and self.setpoint is not None:
            sp = self.setpoint
            if isinstance(sp, RatesSetpoint):
                thrust = ThrustMap(self.params["MPC_THR_HOVER"], cf2x.MASS, cf2x.GRAVITY).newtons(sp.thrust)
                ctl.set_target(BodyRateTarget(min(thrust, 4 * cf2x.THRUST_MAX), frd_to_flu(np.array(sp.rates_frd))), t)
            elif isinstance(sp, PositionSetpoint):
                ctl.set_target(FlightTarget(self.origin + ned_to_enu(np.array(sp.position_ned)),
                                            yaw_ned_to_enu(sp.yaw)), t)
            else:  # velocity: the position loop pinned to the vehicle leaves a velocity loop with hover feed-forward
                v = ned_to_enu(np.array(sp.velocity_ned))
                self._carrot = s.pos.copy()
                self._carrot_yaw -= sp.yaw_rate * dt if self.armed else 0.0
                ctl.set_target(FlightTarget(self._carrot, self._carrot_yaw, v), t)
        elif self.mode == LAND:
            speed = self.params["MPC_LAND_SPEED"]
            self._carrot[2] = max(min(self._carrot[2] - speed * dt, s.pos[2]), self.origin[2] - 0.1)
            ctl.set_target(FlightTarget(self._carrot, self._carrot_yaw, np.array([0.0, 0.0, -speed])), t)
        else:  # Hold (and OFFBOARD before any setpoint): the position where the mode started
            ctl.set_target(FlightTarget(self._carrot, self._carrot_yaw), t)

    def _telemetry(self, now: float) -> None:
        s, ms = self.body(), self.time_ms(now)
        due = [k for k, t in self._next_send.items() if now >= t]
        for msg_id in due:
            self._next_send[msg_id] = max(self._next_send[msg_id] + self.intervals[msg_id], now)
            if msg_id == mavlink.MAVLINK_MSG_ID_HEARTBEAT:
                base = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mavlink.MAV_MODE_FLAG_SAFETY_ARMED if self.armed
                                                                    else 0)
                status = (mavlink.MAV_STATE_CRITICAL if self.failsafe_since is not None
                          else mavlink.MAV_STATE_ACTIVE if self.armed else mavlink.MAV_STATE_STANDBY)
                self.mav.heartbeat_send(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4, base, self.mode, status)
            elif msg_id == mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION:
                q, w = quat_enu_to_ned(s.quat), flu_to_frd(s.angvel)
                self.mav.attitude_quaternion_send(ms, *q, *w)
            elif msg_id == mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED:
                self.mav.local_position_ned_send(ms, *enu_to_ned(s.pos - self.origin), *enu_to_ned(s.linvel))
            elif msg_id == mavlink.MAVLINK_MSG_ID_HIGHRES_IMU:
                accel = self.backend.data.qacc[:3] + np.array([0.0, 0.0, cf2x.GRAVITY])  # specific force, world
                f = flu_to_frd(quat_to_mat(s.quat).T @ accel)
                g = flu_to_frd(s.angvel)
                self.mav.highres_imu_send(int((now - self._wall0) * 1e6), *f, *g, 0.2, 0.0, 0.4, 1013.0, 0.0,
                                          -enu_to_ned(s.pos)[2], 25.0, 0x1FFF)
            elif msg_id == mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE:
                landed = _ON_GROUND if not self.armed or self._landed() else _IN_AIR
                landed = _LANDING if self.mode == LAND and landed == _IN_AIR else landed
                self.mav.extended_sys_state_send(mavlink.MAV_VTOL_STATE_UNDEFINED, landed)

    # --- loop ------------------------------------------------------------------------------------------------
    def spin_once(self, now: float) -> None:
        """One tick: run the mode logic, apply the setpoint, catch the physics up with wall time, send telemetry."""
        self._update(now)
        self._advance(now)
        self._telemetry(now)

    def _update(self, now: float) -> None:
        self._failsafe(now)
        self._apply_setpoint(max(now - self._last_update, 0.0))
        self._last_update = now

    def _advance(self, now: float) -> None:
        """Step the physics up to wall time ``now`` under the current setpoint."""
        due = self._sim0 + (now - self._wall0)
        steps = min(int((due - self.backend.time) * self.config.physics_hz), int(0.05 * self.config.physics_hz))
        if steps > 0:
            reason = self.backend.step(steps, self.actuators, self._control)
            if reason:
                self._disarm(f"simulation diverged ({reason})")
        lag = due - self.backend.time
        if lag > 0.05:  # fell behind (a loaded machine): do not spiral, drop the lag
            self._sim0 -= lag

    def receive(self, now: float) -> None:
        """Handle every datagram waiting now."""
        while True:
            try:
                data = self.sock.recv(65535)
            except BlockingIOError:
                return
            for msg in self.mav.parse_buffer(data) or []:
                if msg.get_type() != "BAD_DATA":
                    self._handle(msg, now)

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set."""
        period = 1.0 / self.config.tick_hz
        next_tick = time.monotonic()
        while not stop.is_set():
            readable, _, _ = select.select([self.sock], [], [], max(0.0, next_tick - time.monotonic()))
            now = time.monotonic()
            if readable:  # the physics reaches the arrival under the old setpoint, the new one acts from now
                self._advance(now)
                self.receive(now)
                self._update(now)
            if now >= next_tick:
                self.spin_once(now)
                next_tick = max(next_tick + period, now)

    def close(self) -> None:
        """Release the port."""
        self.sock.close()


def _parse(argv: list[str]) -> tuple[EmulatorConfig, dict[str, float]]:
    parser = argparse.ArgumentParser(prog="px4_emulator", description=__doc__.split("\n")[0])
    defaults = EmulatorConfig()
    parser.add_argument("--local-port", type=int, default=defaults.local_port)
    parser.add_argument("--remote-host", default=defaults.remote_host)
    parser.add_argument("--remote-port", type=int, default=defaults.remote_port)
    parser.add_argument("--system-id", type=int, default=defaults.system_id)
    parser.add_argument("--physics-hz", type=float, default=defaults.physics_hz)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help=f"PX4 parameter ({', '.join(DEFAULT_PARAMS)})")
    args = parser.parse_args(argv)
    params = {}
    for item in args.param:
        name, _, value = item.partition("=")
        if name not in DEFAULT_PARAMS:
            parser.error(f"unknown parameter {name!r} (known: {sorted(DEFAULT_PARAMS)})")
        try:
            params[name] = float(value)
        except ValueError:
            parser.error(f"--param {item}: value is not a number")
    return EmulatorConfig(args.local_port, args.remote_host, args.remote_port, args.system_id,
                          args.physics_hz), params


def main(argv: list[str] | None = None) -> int:
    """``px4_emulator [--local-port 14580] [--remote-port 14540] [--param COM_OF_LOSS_T=0.5]``.

    Arguments after ``--ros-args`` (added when a launch file starts it as a node) are ignored.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--ros-args" in argv:
        argv = argv[:argv.index("--ros-args")]
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="[px4_emulator] %(message)s")
    config, params = _parse(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    emulator = Px4Emulator(config, params)
    log.info("PX4 emulator (cf2x) system %d: listening on udp %d, sending to %s:%d; params %s", config.system_id,
             config.local_port, config.remote_host, config.remote_port,
             {k: round(v, 4) for k, v in emulator.params.items()})
    try:
        emulator.run(stop)
    finally:
        emulator.close()
    return 0
