"""An emulated Crazyflie 2.x: our MuJoCo cf2x under its cascaded controller, speaking CRTP over UDP.

Reached as Bitcraze's Crazyflie SITL is, through cflib's ``udp://<host>:<port>`` driver (one CRTP packet per
datagram, header byte first: cflib/crtp/udpdriver.py), so unmodified cflib (``Crazyflie().open_link``,
``SyncCrazyflie``), cfclient and the robot_rl bridge connect to it as to a vehicle. The CRTP services are
:mod:`robot_rl.hardware.crazyflie_firmware`'s; this module is the vehicle behind them:

* physics: :class:`robot_rl.sim.live.LiveSim`'s cf2x scene, stepped at ``physics_hz`` paced to wall time,
  starting at rest on the floor (where a Crazyflie is at boot; the model's origin then reads z = 0.065 m);
* "firmware" controller: :class:`robot_rl.control.quadrotor.QuadrotorController` (position -> attitude ->
  rates -> mixing) tracks the decoded setpoints; PWM becomes thrust through
  :class:`~robot_rl.hardware.crazyflie_protocol.ThrustMap` (the bridge's inverse);
* high-level commander (port 8): its take-off / land / go-to goals are full-state setpoints for the same
  controller, produced each physics step from the state estimate
  (:class:`~robot_rl.hardware.crazyflie_high_level.HighLevelPlanner`);
* supervisor (supervisor.c): a setpoint older than 0.5 s levels the vehicle (approximated by holding the
  current x/y and the commanded height or thrust), older than 2 s while flying cuts the motors and locks;
  an emergency stop (supervisor port, localization port, ``stabilizer.stop`` or an expired e-stop
  watchdog) cuts the motors and locks until the emulator restarts (a reboot on hardware); disarming
  (supervisor arming request) stops the motors; while locked or disarmed the high-level planner is held
  stopped, so arming never resumes a trajectory commanded before (the emulator's fail-safe choice);
  ``supervisor.info`` carries the state bits cflib decodes;
* the state estimate is the simulator's exact state (no estimator, no sensor noise): ``stateEstimate.*``,
  ``stabilizer.roll/pitch/yaw`` (degrees, legacy pitch sign) and a constant ``kalman.varP*``; the battery
  voltage sags with thrust.
"""

from __future__ import annotations

import argparse
import logging
import math
import select
import socket
import sys
import time
from collections.abc import Sequence

import numpy as np

from robot_rl.control.quadrotor import QuadrotorController
from robot_rl.control.rotations import quat_to_mat, quat_yaw
from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.hardware import crazyflie_protocol as p
from robot_rl.hardware.crazyflie_firmware import WDT_SHUTDOWN_S, CrazyflieFirmware, FirmwareSetpoint
from robot_rl.hardware.crazyflie_protocol import ThrustMap, encode_state
from robot_rl.robots import cf2x
from robot_rl.sim.live import LiveSim, LiveSimConfig

log = logging.getLogger("crazyflie_emulator")
WDT_LEVEL_S = 0.5
"""Setpoint age at which the firmware levels the vehicle (COMMANDER_WDT_TIMEOUT_STABILIZE)."""
ESTOP_WATCHDOG_S = 1.0
"""An armed emergency-stop watchdog not renewed for this long stops the motors."""
IS_FLYING_HYSTERESIS_S = 2.0
"""The firmware calls the vehicle flying while it commanded thrust within this window."""
POSITION_VARIANCE = 1e-6
"""``kalman.varPX/PY/PZ`` [m^2]: the estimate is exact, so the variance is a small constant (cflib's
reset_estimator waits for it to settle below 1e-3)."""
__all__ = ["WDT_LEVEL_S", "WDT_SHUTDOWN_S", "CrazyflieUdpServer", "EmulatedCrazyflie", "main"]


class EmulatedCrazyflie:
    """The vehicle: physics, firmware controller and supervisor, advanced by :meth:`step`."""

    def __init__(self, physics_hz: float = 500.0, start_xy: tuple[float, float] = (0.0, 0.0),
                 start_yaw: float = 0.0) -> None:
        self.sim = LiveSim(LiveSimConfig(robot="cf2x", controller="quadrotor", physics_hz=physics_hz,
                                         with_object=False))
        inner = self.sim.controller.inner
        assert isinstance(inner, QuadrotorController)
        self.controller = inner
        self.thrust_map = ThrustMap()
        self.firmware = CrazyflieFirmware(time.monotonic)
        self.state = "ready"
        """ready | flying | level_out | locked (supervisor.c's states, simplified)."""
        self.lock_reason = ""
        self.thrusts = np.zeros(4)
        self._kind = ""
        self._ref = np.zeros(3)
        self._ref_yaw = 0.0
        self._last_thrust_time = -math.inf
        self._level_target: FlightTarget | BodyRateTarget | None = None
        self._rest(start_xy, start_yaw)

    def _rest(self, xy: tuple[float, float], yaw: float = 0.0) -> None:
        """Put the vehicle on the floor, heading ``yaw`` [rad], and let it settle with the motors off."""
        qpos = self.sim.description.home_qpos(self.sim.model)
        qpos[0], qpos[1], qpos[2] = xy[0], xy[1], 0.1
        qpos[3:7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        self.sim.backend.reset(qpos, np.zeros(self.sim.model.nv))
        self.sim.backend.step(int(0.5 * self.sim.config.physics_hz), self.sim.actuators,
                              lambda: np.zeros(len(self.sim.actuators)))
        self.controller.warm_up(self.sim.state())  # load the compiled law now, not at take-off

    # --- supervisor -------------------------------------------------------------------------------------------
    def _lock(self, reason: str) -> None:
        if self.state != "locked":
            self.state, self.lock_reason = "locked", reason
            log.warning("supervisor: motors off and locked (%s); restart the emulator (reboot) to fly again", reason)

    def _supervise(self, now: float) -> FirmwareSetpoint | None:
        """The setpoint the controller follows now (None: motors off), after the supervisor's checks."""
        fw = self.firmware
        if fw.estop_watchdog is not None and now - fw.estop_watchdog > ESTOP_WATCHDOG_S:
            fw.estop_requested = fw.estop_requested or "emergency stop watchdog expired"
        if fw.estop_requested:
            self._lock(fw.estop_requested)
        sp = fw.setpoint
        if self.state == "locked" or not fw.armed:
            fw.planner.stop()  # a trajectory planned while the motors may not run never resumes on arming
            return None
        if sp is None:
            return None
        age = now - sp.stamp
        flying = now - self._last_thrust_time < IS_FLYING_HYSTERESIS_S
        if self.state in ("flying", "level_out") and age > WDT_SHUTDOWN_S:
            self._lock(f"commander watchdog: no setpoint for {age:.1f} s in flight")
            return None
        if self.state == "ready" and flying:
            self.state = "flying"
        elif self.state in ("flying", "level_out"):
            if not flying:
                self.state = "ready"
            elif age > WDT_LEVEL_S:
                if self.state != "level_out":
                    log.warning("supervisor: no setpoint for %.2f s: levelling out", age)
                self.state = "level_out"
            else:
                self.state = "flying"
        return sp

    def _info_bits(self) -> int:
        bits = p.SUP_AUTO_ARMED
        if self.state != "locked":
            bits |= p.SUP_CAN_BE_ARMED | p.SUP_CAN_FLY | (p.SUP_IS_ARMED if self.firmware.armed else 0)
        if self.state in ("flying", "level_out"):
            bits |= p.SUP_IS_FLYING
        if self.state == "locked":
            bits |= p.SUP_IS_LOCKED
        if self._tumbled():
            bits |= p.SUP_IS_TUMBLED
        return bits | self.firmware.high_level_bits(time.monotonic())

    def _tumbled(self) -> bool:
        """Tilted more than 60 degrees (an approximation of supervisor.c's tumble check, without its delay)."""
        quat = self.sim.data.qpos[3:7]
        return bool(quat_to_mat(np.asarray(quat))[2, 2] < 0.5)

    # --- control ----------------------------------------------------------------------------------------------
    def _target(self, sp: FirmwareSetpoint, pos: np.ndarray, quat: np.ndarray, dt: float
                ) -> FlightTarget | BodyRateTarget | None:
        """The controller target for a setpoint (None: motors off); integrates velocity references."""
        kind = "level" if self.state == "level_out" else sp.kind
        if kind != self._kind:  # a new control mode: restart from here, as controllerPidReinitialize does
            self._kind, self._ref, self._ref_yaw = kind, pos.copy(), quat_yaw(quat)
            self.controller.reset(self.sim.state())
            self._level_target = None
        if kind == "stop":
            return None
        if kind == "level":
            if self._level_target is None:
                z_held = sp.kind in ("position", "velocity", "hover", "full_state")
                self._level_target = (FlightTarget(np.array([pos[0], pos[1], sp.position[2] if sp.kind != "velocity"
                                                             else pos[2]]), quat_yaw(quat)) if z_held
                                      else BodyRateTarget(self.thrust_map.collective(sp.pwm), np.zeros(3)))
            return self._level_target
        if kind == "position":
            return FlightTarget(sp.position, sp.yaw)
        if kind == "full_state":
            return FlightTarget(sp.position, sp.yaw, sp.velocity, sp.acceleration)
        if kind in ("velocity", "hover"):
            self._ref_yaw += sp.yaw_rate * dt
            if kind == "hover":
                c, s = math.cos(self._ref_yaw), math.sin(self._ref_yaw)
                vel = np.array([c * sp.velocity[0] - s * sp.velocity[1], s * sp.velocity[0] + c * sp.velocity[1], 0.0])
                self._ref[:2] += vel[:2] * dt
                self._ref[2] = sp.position[2]
            else:
                vel = sp.velocity
                self._ref += vel * dt
            return FlightTarget(self._ref.copy(), self._ref_yaw, vel)
        thrust = self.thrust_map.collective(sp.pwm)
        if thrust <= 0.0:
            return None
        rates = sp.rates.copy()
        if kind == "attitude":
            rot = quat_to_mat(quat)
            roll, pitch = math.atan2(rot[2, 1], rot[2, 2]), -math.asin(max(-1.0, min(1.0, rot[2, 0])))
            att_kp = self.controller.config.att_kp
            for axis, angle in ((0, roll), (1, pitch)):
                if sp.angle_mode[axis]:
                    rates[axis] = att_kp[axis] * (sp.angles[axis] - angle)
        return BodyRateTarget(thrust, rates)

    def _control(self) -> np.ndarray:
        data = self.sim.data
        now = time.monotonic()
        state = self.sim.index.read(data)
        assert state.base_pos is not None and state.base_quat is not None and state.base_linvel is not None
        self.firmware.high_level_step(now, state.base_pos, state.base_linvel, quat_yaw(state.base_quat))
        sp = self._supervise(now)
        target = None if sp is None else self._target(sp, state.base_pos, state.base_quat,
                                                      self.sim.model.opt.timestep)
        if target is None:
            self._kind = "" if sp is None else self._kind
            self.thrusts = np.zeros(4)
        else:
            self.controller.set_target(target, state.stamp)
            self.thrusts = self.controller.compute(state, state.stamp)
            if float(np.sum(self.thrusts)) > 0.05 * cf2x.MASS * cf2x.GRAVITY:
                self._last_thrust_time = now
        return self.sim.description.actuate(self.thrusts, 1.0)

    def step(self, n: int) -> None:
        """Advance ``n`` physics steps (the supervisor and controller run at each)."""
        reason = self.sim.backend.step(n, self.sim.actuators, self._control)
        if reason:
            log.error("simulation diverged (%s): back on the floor, locked", reason)
            self._lock(f"simulation diverged: {reason}")
            self._rest((0.0, 0.0))
        self.firmware.info_bits = self._info_bits()

    def log_values(self) -> dict[str, float]:
        """Every loggable variable's current value."""
        st = self.sim.state()
        assert st.base_pos is not None and st.base_quat is not None and st.base_linvel is not None
        assert st.base_angvel is not None
        thrust = float(np.sum(self.thrusts))
        vbat = 4.1 - 0.5 * thrust / (4 * cf2x.THRUST_MAX)
        values = encode_state(st.base_pos, st.base_linvel, st.base_quat, st.base_angvel, vbat)
        w, x, y, z = st.base_quat
        rot = quat_to_mat(st.base_quat)
        roll = math.degrees(math.atan2(rot[2, 1], rot[2, 2]))
        pitch = math.degrees(math.asin(max(-1.0, min(1.0, rot[2, 0]))))  # legacy sign: nose up positive
        yaw = math.degrees(math.atan2(rot[1, 0], rot[0, 0]))
        info = self.firmware.info_bits
        values.update({"stateEstimate.x": st.base_pos[0], "stateEstimate.y": st.base_pos[1],
                       "stateEstimate.z": st.base_pos[2], "stateEstimate.vx": st.base_linvel[0],
                       "stateEstimate.vy": st.base_linvel[1], "stateEstimate.vz": st.base_linvel[2],
                       "stateEstimate.qx": x, "stateEstimate.qy": y, "stateEstimate.qz": z, "stateEstimate.qw": w,
                       "gyro.x": math.degrees(st.base_angvel[0]), "gyro.y": math.degrees(st.base_angvel[1]),
                       "gyro.z": math.degrees(st.base_angvel[2]), "pm.batteryLevel": 100.0 * (vbat - 3.0) / 1.2,
                       "pm.state": 0.0, "stabilizer.thrust": self.thrust_map.pwm(thrust),
                       "supervisor.info": float(info), "stabilizer.roll": roll, "stabilizer.pitch": pitch,
                       "stabilizer.yaw": yaw, "stateEstimate.roll": roll, "stateEstimate.pitch": pitch,
                       "stateEstimate.yaw": yaw, "kalman.varPX": POSITION_VARIANCE,
                       "kalman.varPY": POSITION_VARIANCE, "kalman.varPZ": POSITION_VARIANCE,
                       "range.zrange": 1000.0 * max(0.0, float(st.base_pos[2])),
                       "sys.canfly": float(bool(info & p.SUP_CAN_FLY)),
                       "sys.isFlying": float(bool(info & p.SUP_IS_FLYING)),
                       "sys.isTumbled": float(bool(info & p.SUP_IS_TUMBLED))})
        for i, t in enumerate(self.thrusts):
            values[f"motor.m{i + 1}"] = float(self.thrust_map.curve.command(np.array(t))) * 65535.0
        return values


def _opens_link(packet: bytes) -> bool:
    """The link service's source request (port 15, channel 1): cflib's first packet of every connection."""
    return bool(packet) and packet[0] >> 4 == 0xF and packet[0] & 0x3 == 1


class CrazyflieUdpServer:
    """The emulator's loop: receive CRTP datagrams, step the vehicle in real time, send log data."""

    def __init__(self, vehicle: EmulatedCrazyflie, host: str = "127.0.0.1", port: int = 19850) -> None:
        self.vehicle = vehicle
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()
        self.client: tuple[str, int] | None = None
        self.running = True

    def serve(self, duration: float | None = None) -> None:
        """Run until :meth:`stop` (or ``duration`` seconds)."""
        hz = self.vehicle.sim.config.physics_hz
        t0 = time.monotonic()
        end = math.inf if duration is None else t0 + duration
        done = 0
        while self.running and time.monotonic() < end:
            now = time.monotonic()
            due = int((now - t0) * hz) - done
            if due > 20:  # fell behind (a starved CPU): skip ahead instead of spiralling
                t0 += (due - 20) / hz
                due = 20
            if due > 0:
                self.vehicle.step(due)
                done += due
                if self.client is not None:
                    packets = self.vehicle.firmware.due_log_packets(self.vehicle.log_values()) \
                        if any(b.running for b in self.vehicle.firmware.blocks.values()) else []
                    for packet in packets:
                        self._send(packet)
            wait = t0 + (done + 1) / hz - time.monotonic()
            readable, _, _ = select.select([self.sock], [], [], max(0.0, wait))
            if readable:
                self._receive()

    def _receive(self) -> None:
        while True:
            try:
                packet, addr = self.sock.recvfrom(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ICMP port unreachable from a client that went away
                log.debug("receive: %s", exc)
                continue
            if self.client is None or (_opens_link(packet) and addr != self.client):
                log.info("client %s:%d connected", *addr)  # cflib's first packet of open_link
                self.client = addr
            for reply in self.vehicle.firmware.handle(packet):
                self._send(reply, addr)

    def _send(self, packet: bytes, addr: tuple[str, int] | None = None) -> None:
        """Replies go to their sender, log data to the client that connected last (a radio link has one)."""
        target = addr or self.client
        if target is None:
            return
        try:
            self.sock.sendto(packet, target)
        except OSError as exc:
            log.debug("send to %s: %s", target, exc)

    def stop(self) -> None:
        """End :meth:`serve` and free the port."""
        self.running = False

    def close(self) -> None:
        """Free the port."""
        self.sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``crazyflie_emulator --port 19850``: serve one emulated Crazyflie until Ctrl-C."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if "--ros-args" in args_in:  # started as a launch-file node: ROS arguments are not ours
        args_in = args_in[:args_in.index("--ros-args")]
    parser = argparse.ArgumentParser(prog="crazyflie_emulator", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=19850, help="UDP port (cflib's SITL ports are 19850-19859)")
    parser.add_argument("--physics-hz", type=float, default=500.0, help="physics and controller rate")
    parser.add_argument("--start", type=float, nargs=2, default=(0.0, 0.0), metavar=("X", "Y"),
                        help="where on the floor the vehicle boots [m]")
    parser.add_argument("--start-yaw", type=float, default=0.0, help="heading at boot [deg]")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(args_in)
    logging.basicConfig(level=args.log_level.upper(), format="[crazyflie_emulator] %(levelname)s %(message)s",
                        stream=sys.stdout)
    vehicle = EmulatedCrazyflie(args.physics_hz, tuple(args.start), math.radians(args.start_yaw))
    try:
        server = CrazyflieUdpServer(vehicle, args.host, args.port)
    except OSError as exc:
        log.error("cannot listen on udp://%s:%d: %s", args.host, args.port, exc)
        return 2
    log.info("emulated Crazyflie on udp://%s:%d (physics %g Hz); resting at z=%.3f m", args.host, args.port,
             args.physics_hz, float(vehicle.sim.data.qpos[2]))
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
