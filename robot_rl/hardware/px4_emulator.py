"""An emulated PX4 multirotor: our MuJoCo Crazyflie behind PX4's MAVLink 2 interface, over UDP.

Plays PX4 SITL's offboard link (``mavlink start -u 14580 -o 14540 -m onboard``): it listens on a local UDP port
and sends to the offboard API port, MAVLink 2, system 1, component 1. Behind it the cf2x model
(:mod:`robot_rl.robots.cf2x`) flies under :class:`~robot_rl.control.quadrotor.QuadrotorController` standing in
for PX4's rate and velocity/position controllers, paced to wall time. MAVSDK (``udpin://127.0.0.1:14540``) or
a ground station on that port sees a PX4 v1.15 multirotor.

Emulated, modelled on PX4 v1.15 (the PX4 user guide, https://docs.px4.io, and the MAVLink common message set,
https://mavlink.io/en/messages/common.html; not checked against a real PX4 or SITL here):

- modes: Hold (AUTO.LOITER, where it boots), Takeoff, Land, Return (AUTO.RTL), Offboard
  (:mod:`robot_rl.hardware.px4_auto`); OFFBOARD entry refused (TEMPORARILY_REJECTED) unless setpoints stream
  at > 2 Hz; the offboard-loss failsafe: no setpoint for ``COM_OF_LOSS_T`` -> Hold for ``COM_FAIL_ACT_T``, then
  Land; auto-disarm ``COM_DISARM_LAND`` after touching down, ``COM_DISARM_PRFLT`` after arming without taking
  off; armed on the ground in Hold the motors idle (PX4's land detector keeps it on the ground);
- commands (COMMAND_LONG and COMMAND_INT, each answered by COMMAND_ACK): see :mod:`robot_rl.hardware.px4_commands`;
- parameters by name and by index (PARAM_REQUEST_READ / PARAM_REQUEST_LIST / PARAM_SET, REAL32);
- telemetry in NED/FRD at requested intervals: HEARTBEAT (base_mode flags as PX4 sets them), ATTITUDE,
  ATTITUDE_QUATERNION, LOCAL_POSITION_NED, GLOBAL_POSITION_INT, GPS_RAW_INT, HOME_POSITION (set at boot and at
  arming), SYS_STATUS (sensor and pre-arm bits), BATTERY_STATUS, HIGHRES_IMU, EXTENDED_SYS_STATE; STATUSTEXT
  for every mode and arming event (:mod:`robot_rl.hardware.px4_telemetry`).

Not emulated: the EKF (telemetry is the true state, local origin = the start point = the global reference),
RC and manual modes (POSCTL, ALTCTL, ... are refused: no RC), missions, geofence, PX4's arming checks beyond
"a mode that can arm", attitude setpoints (only body rates + thrust), acceleration setpoints, the land detector
beyond a height/speed test, TIMESYNC, MAVLink signing, more than one ground station (replies go to the one
remote address).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
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
from robot_rl.control.rotations import quat_yaw
from robot_rl.control.stepping import StateIndex
from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware import px4_commands, px4_telemetry
from robot_rl.hardware.px4_auto import AIRBORNE, RTL, TAKEOFF, AutoModes, Carrot
from robot_rl.hardware.px4_codec import (
    HOLD,
    LAND,
    OFFBOARD,
    PositionSetpoint,
    RatesSetpoint,
    Setpoint,
    SetpointRefused,
    ThrustMap,
    decode_setpoint,
    enu_to_ned,
    frd_to_flu,
    mode_name,
    ned_to_enu,
    parse_datagram,
    yaw_ned_to_enu,
)
from robot_rl.hardware.px4_vehicle import SITL_HOME, BatteryModel, Body, GeoFrame
from robot_rl.robots import actuator_indices, cf2x, description
from robot_rl.sim.backend import MujocoBackend

log = logging.getLogger("px4_emulator")
DEFAULT_PARAMS = {
    "COM_OF_LOSS_T": 0.5, "COM_FAIL_ACT_T": 1.0, "MPC_LAND_SPEED": 0.5, "COM_DISARM_LAND": 0.5,
    "MPC_THR_HOVER": cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX), "COM_DISARM_PRFLT": 10.0,
    "MIS_TAKEOFF_ALT": 1.0, "MPC_TKO_SPEED": 0.8, "MPC_XY_CRUISE": 1.0, "MPC_Z_VEL_MAX_UP": 0.8,
    "RTL_RETURN_ALT": 1.5, "MPC_XY_VEL_MAX": 1.0,
}
"""PX4 parameters the emulator honours, all REAL32 as in PX4. Values suit the 27 g cf2x indoors; PX4's own
defaults are 1.0 s, 5 s, 0.7 m/s, 2 s, -, 10 s, 2.5 m, 1.5 m/s, 5 m/s, 3 m/s, 60 m, 12 m/s. Offboard
position setpoints are approached at most at MPC_XY_VEL_MAX / MPC_Z_VEL_MAX_UP (also used downwards here)."""
_FEED_FORWARD = np.array([0.5, 0.5, 1.0])
"""Share of the AUTO carrot's velocity fed forward: full on z (no climb lag), half on x/y (the cf2x position
loop overshoots a stopping carrot by ~10 cm with all of it; PX4 would shape a jerk-limited trajectory)."""


def _is_loopback(host: str) -> bool:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    return host == "localhost"


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
    bind: str = "127.0.0.1"
    """Address the vehicle's socket binds. PX4 SITL binds every interface (0.0.0.0); the emulator defaults to
    loopback so that a vehicle that arms and flies on command is not reachable from the network unless asked
    (``--bind 0.0.0.0`` reproduces SITL). A loopback bind needs a loopback ``remote_host``."""
    home: tuple[float, float, float] = SITL_HOME
    """Global reference of the start point: lat [deg], lon [deg], altitude AMSL [m] (PX4 SITL's home)."""

    def __post_init__(self) -> None:
        if not 0 < self.local_port < 65536 or not 0 < self.remote_port < 65536:
            raise ValueError("ports must be in 1..65535")
        if not 50 <= self.physics_hz <= 5000 or not 10 <= self.tick_hz <= self.physics_hz:
            raise ValueError("physics_hz must be in [50, 5000] and tick_hz in [10, physics_hz]")
        if _is_loopback(self.bind) and not _is_loopback(self.remote_host):
            raise ValueError(f"bind {self.bind} is loopback but remote_host {self.remote_host} is not: "
                             "bind 0.0.0.0 (or that interface's address) to reach it")
        GeoFrame(*self.home)  # validates


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
        self.airborne = False
        """Taken off since arming (PX4's ``have_taken_off_since_arming``); until then Hold idles the motors."""
        qpos = desc.home_qpos(model)
        qpos[2] = 0.065  # resting on its legs
        self.backend.reset(qpos, np.zeros(model.nv))
        self.backend.step(int(0.3 * config.physics_hz), self.actuators, self._control)  # settle on the floor
        self.controller.warm_up(self.index.read(self.backend.data))  # load the compiled law now, not when armed
        self.origin = self.body().pos.copy()
        self.geo = GeoFrame(*config.home)
        self.auto = AutoModes(self.params, float(self.origin[2]))
        self.auto.home = self.origin.copy()
        self.battery = BatteryModel()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((config.bind, config.local_port))
        self.sock.setblocking(False)
        self.remote = (config.remote_host, config.remote_port)
        self.mav = mavlink.MAVLink(self, srcSystem=config.system_id, srcComponent=mavlink.MAV_COMP_ID_AUTOPILOT1)
        self.mav.robust_parsing = True
        self.mode = HOLD
        self.setpoint: Setpoint | None = None
        self.setpoint_times: deque[float] = deque(maxlen=64)
        self.failsafe_since: float | None = None
        self.landed_since: float | None = None
        self.armed_at = 0.0
        self.intervals = {k: 1.0 / v for k, v in px4_telemetry.DEFAULT_RATES.items()}
        self.next_send = dict.fromkeys(self.intervals, 0.0)
        self.carrot = Carrot(self.origin.copy(), quat_yaw(self.body().quat))
        self._wall0 = self._last_update = time.monotonic()
        self._sim0 = self.backend.time
        self.events: list[str] = []
        """Every mode/arming event, as logged (tests read it for in-process runs)."""

    # --- io --------------------------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        """Pymavlink's file: one datagram to the offboard API port (dropped when nobody listens)."""
        with contextlib.suppress(OSError):
            self.sock.sendto(data, self.remote)

    def event(self, text: str, severity: int = mavlink.MAV_SEVERITY_INFO) -> None:
        """Log ``text``, keep it in :attr:`events` and send it as STATUSTEXT."""
        log.info(text)
        self.events.append(text)
        self.mav.statustext_send(severity, text.encode()[:50])

    def time_ms(self, now: float) -> int:
        """time_boot_ms of a message sent at ``now``."""
        return int((now - self._wall0) * 1000)

    def time_us(self, now: float) -> int:
        """time_usec (since boot) of a message sent at ``now``."""
        return int((now - self._wall0) * 1e6)

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

    def local_ned(self, enu: np.ndarray) -> np.ndarray:
        """A world ENU point in PX4's local NED frame (origin = the start point)."""
        return enu_to_ned(np.asarray(enu) - self.origin)

    def stream_alive(self, now: float) -> bool:
        """PX4's offboard-signal check: setpoints at > 2 Hz, the newest younger than COM_OF_LOSS_T."""
        recent = [t for t in self.setpoint_times if now - t <= 1.0]
        return len(recent) >= 2 and now - recent[-1] <= self.params["COM_OF_LOSS_T"]

    def landed(self) -> bool:
        """PX4's land detector, reduced to: on the ground and not moving vertically."""
        s = self.body()
        return bool(s.pos[2] - self.origin[2] < 0.03 and abs(s.linvel[2]) < 0.1)

    def can_arm(self, now: float) -> str | None:
        """Why arming would be denied now, or None (the pre-arm check bit of SYS_STATUS)."""
        if self.mode in (LAND, RTL):
            return f"Arming denied: not in {mode_name(self.mode)}"
        if self.mode == OFFBOARD and not self.stream_alive(now):
            return "Arming denied: no offboard signal"
        if self.battery.remaining < 0.1:
            return "Arming denied: battery critical"
        return None

    def set_mode(self, mode: int, why: str) -> None:
        """Switch mode; the new one starts from where the vehicle is."""
        if mode != self.mode:
            self.mode = mode
            self.event(f"mode {mode_name(mode)}: {why}")
            s = self.body()
            self.carrot = Carrot(s.pos.copy(), quat_yaw(s.quat))
            self.auto.rtl_phase = ""
            if mode == OFFBOARD:
                self.failsafe_since = None
                if self.armed and not self.airborne:
                    self.controller.reset(self.state())

    def arm(self, now: float, forced: bool) -> None:
        """Arm: home is set here (PX4 commander), the controller starts from the present state."""
        self.armed, self.airborne, self.landed_since, self.armed_at = True, False, None, now
        self.controller.reset(self.state())
        self.auto.home = self.body().pos.copy()
        self.next_send[mavlink.MAVLINK_MSG_ID_HOME_POSITION] = now
        self.event("Armed by external command" + (" (forced)" if forced else ""))

    def disarm(self, why: str) -> None:
        """Stop the motors."""
        if self.armed:
            self.armed = False
            self.event(f"Disarmed: {why}", mavlink.MAV_SEVERITY_WARNING)

    # --- messages --------------------------------------------------------------------------------------------
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
        elif kind in ("COMMAND_LONG", "COMMAND_INT") and msg.target_system in (0, self.config.system_id):
            px4_commands.handle(self, msg, now)
        elif kind in ("PARAM_REQUEST_READ", "PARAM_SET", "PARAM_REQUEST_LIST"):
            px4_commands.param(self, msg)

    # --- control ---------------------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Armed on the ground outside Takeoff/Offboard: motors at idle, as PX4's land detector keeps them."""
        return not self.airborne and self.mode not in (TAKEOFF, OFFBOARD)

    def _control(self) -> np.ndarray:
        if not self.armed or self.idle():
            return cf2x.rotor_commands(np.zeros(4))
        return cf2x.rotor_commands(self.controller.compute(self.index.read(self.backend.data), self.backend.time))

    def _failsafe(self, now: float) -> None:
        p = self.params
        if self.mode == OFFBOARD and not self.stream_alive(now):
            if self.armed:
                self.failsafe_since = now
                self.event("Failsafe activated: no offboard signal, holding", mavlink.MAV_SEVERITY_CRITICAL)
            self.set_mode(HOLD, "offboard signal lost")
        if self.failsafe_since is not None and self.mode == HOLD and now - self.failsafe_since >= p["COM_FAIL_ACT_T"]:
            self.set_mode(LAND, "failsafe action after COM_FAIL_ACT_T")
        if not self.armed:
            return
        if self.body().pos[2] - self.origin[2] > AIRBORNE:
            self.airborne = True
        if not self.airborne:
            if now - self.armed_at >= p["COM_DISARM_PRFLT"] and self.landed():
                self.disarm("auto disarm: not taken off within COM_DISARM_PRFLT")
            return
        if self.landed():
            self.landed_since = now if self.landed_since is None else self.landed_since
            if now - self.landed_since >= p["COM_DISARM_LAND"]:
                self.disarm("auto disarm on land")
                self.failsafe_since = None
                if self.mode in (LAND, RTL, TAKEOFF):
                    self.set_mode(HOLD, "landed")
        else:
            self.landed_since = None

    def _apply_setpoint(self, dt: float) -> None:
        s, t = self.body(), self.backend.time
        ctl, carrot = self.controller, self.carrot
        if self.mode == OFFBOARD and self.setpoint is not None:
            sp = self.setpoint
            if isinstance(sp, RatesSetpoint):
                thrust = ThrustMap(self.params["MPC_THR_HOVER"], cf2x.MASS, cf2x.GRAVITY).newtons(sp.thrust)
                ctl.set_target(BodyRateTarget(min(thrust, 4 * cf2x.THRUST_MAX), frd_to_flu(np.array(sp.rates_frd))), t)
            elif isinstance(sp, PositionSetpoint):  # PX4 clamps the velocity its position loop may ask for
                carrot.goal = self.origin + ned_to_enu(np.array(sp.position_ned))
                carrot.speed_xy, carrot.speed_z = self.params["MPC_XY_VEL_MAX"], self.params["MPC_Z_VEL_MAX_UP"]
                carrot.yaw = yaw_ned_to_enu(sp.yaw)
                carrot.step(dt)
                ctl.set_target(FlightTarget(carrot.position, carrot.yaw, carrot.velocity * _FEED_FORWARD), t)
            else:  # velocity: the position loop pinned to the vehicle leaves a velocity loop with hover feed-forward
                v = ned_to_enu(np.array(sp.velocity_ned))
                carrot.position, carrot.velocity, carrot.goal = s.pos.copy(), v, None
                carrot.yaw -= sp.yaw_rate * dt if self.armed else 0.0
                ctl.set_target(FlightTarget(carrot.position, carrot.yaw, v), t)
            return
        if self.mode == LAND or (self.mode == RTL and self.auto.rtl_step(carrot, s.pos)):
            ctl.set_target(FlightTarget(carrot.position, carrot.yaw, self.auto.land_step(carrot, s.pos, dt)), t)
            return
        if self.mode == TAKEOFF and self.auto.takeoff_done(carrot, s.pos):
            reached = carrot.position.copy()
            self.set_mode(HOLD, "takeoff complete")
            carrot = self.carrot
            carrot.position = reached  # Hold keeps the takeoff point, not where the climb's momentum carried it
        carrot.step(dt)  # Takeoff, Hold (maybe repositioning), Return's climb and return, Offboard before a setpoint
        ctl.set_target(FlightTarget(carrot.position, carrot.yaw, carrot.velocity * _FEED_FORWARD), t)

    def _telemetry(self, now: float) -> None:
        s, ms = self.body(), self.time_ms(now)
        due = [k for k, t in self.next_send.items() if now >= t]
        for msg_id in due:
            self.next_send[msg_id] = max(self.next_send[msg_id] + self.intervals[msg_id], now)
            px4_telemetry.send(self, msg_id, now, s, ms)

    # --- loop ------------------------------------------------------------------------------------------------
    def spin_once(self, now: float) -> None:
        """One tick: run the mode logic, apply the setpoint, catch the physics up with wall time, send telemetry."""
        self._update(now)
        self._advance(now)
        self._telemetry(now)

    def _update(self, now: float) -> None:
        dt = max(now - self._last_update, 0.0)
        self._failsafe(now)
        self._apply_setpoint(dt)
        thrust = float(np.sum(self.backend.data.ctrl[self.actuators])) if self.armed else 0.0
        self.battery.update(dt, self.armed, thrust / (cf2x.MASS * cf2x.GRAVITY))
        self._last_update = now

    def _advance(self, now: float) -> None:
        """Step the physics up to wall time ``now`` under the current setpoint."""
        due = self._sim0 + (now - self._wall0)
        steps = min(int((due - self.backend.time) * self.config.physics_hz), int(0.05 * self.config.physics_hz))
        if steps > 0:
            reason = self.backend.step(steps, self.actuators, self._control)
            if reason:
                self.disarm(f"simulation diverged ({reason})")
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
            for msg in parse_datagram(self.mav, data):
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
    parser.add_argument("--bind", default=defaults.bind,
                        help="address to listen on (default loopback; 0.0.0.0 = every interface, as PX4 SITL)")
    parser.add_argument("--home", default=",".join(str(v) for v in defaults.home), metavar="LAT,LON,ALT",
                        help="global position of the start point (default PX4 SITL's)")
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
    try:
        lat, lon, alt = (float(v) for v in args.home.split(","))
        return EmulatorConfig(args.local_port, args.remote_host, args.remote_port, args.system_id,
                              args.physics_hz, bind=args.bind, home=(lat, lon, alt)), params
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: error() exits


def main(argv: list[str] | None = None) -> int:
    """``px4_emulator [--local-port 14580] [--remote-port 14540] [--bind 127.0.0.1] [--param COM_OF_LOSS_T=0.5]``.

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
    log.info("PX4 emulator (cf2x) system %d: listening on udp %s:%d, sending to %s:%d; params %s",
             config.system_id, config.bind, config.local_port, config.remote_host, config.remote_port,
             {k: round(v, 4) for k, v in emulator.params.items()})
    try:
        emulator.run(stop)
    finally:
        emulator.close()
    return 0
