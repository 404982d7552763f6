"""The Crazyflie's high-level commander (CRTP port 8): on-board take-off, land and go-to trajectories.

A model of crazyflie-firmware's ``crtp_commander_high_level.c`` and ``planner.c`` (from the Crazyswarm project),
as cflib's ``HighLevelCommander`` and ``PositionHlCommander`` drive it:

* planner states: idle (at boot, after ``stop``, a finished landing, or when a streamed low-level setpoint
  pre-empts it, crazyflie-firmware PR #1298: the commander then asks for motors off at the lowest priority, so
  once cflib's "notify setpoint stop" relaxes the priority the motors stop instead of the commander watchdog
  timing out), flying, landing;
* ``takeoff`` only from idle, ``land`` from any state but landing, ``go_to`` from any state (from idle it
  takes off), ``stop`` back to idle; each plans one 7th-order polynomial per axis and yaw from the current goal
  (or, when idle, the current state estimate) to the target at rest, with zero jerk at both ends
  (``piecewise_plan_7th_order_no_jerk``); ``go_to`` with ``linear`` moves at constant velocity;
* group masks (``set_group_mask``; a command for group 0 reaches every vehicle);
* every command is answered with the firmware's 4-byte reply (byte 3: 0 accepted, 1 refused by the planner,
  ENOEXEC not emulated, EINVAL a non-finite value or a non-positive duration);
* uploaded trajectories: the trajectory memory (memory port 4, mem.c: one memory of type 0x12, 4 KiB,
  :class:`TrajectoryMemory`) holds cflib's ``Poly4D`` pieces (duration and 8 coefficients per axis and yaw);
  ``define_trajectory`` names a span of it, ``start_trajectory`` flies it with a time scale, reversed, relative
  to the current goal's position (``shift``) and heading (rotated about z), as pptraj.c evaluates it.

Not emulated: compressed trajectories and spirals; they are answered ENOEXEC and change nothing, so a vehicle
in flight holds its current goal.
"""

from __future__ import annotations

import logging
import math
import struct
from dataclasses import dataclass, field

import numpy as np

from robot_rl.hardware import crazyflie_protocol as p

log = logging.getLogger(__name__)
IDLE, FLYING, LANDING = "idle", "flying", "landing"
EINVAL, ENOEXEC, EIO = 22, 8, 5
TRAJECTORY_MEMORY_SIZE = 4096
"""Bytes of trajectory memory (crtp_commander_high_level.c TRAJ_MEM_SIZE)."""
TRAJECTORY_MEMORY_TYPE = 0x12
"""mem.h MEM_TYPE_TRAJ (cflib MemoryElement.TYPE_TRAJ)."""
POLY4D_BYTES = 33 * 4
"""One piece: 4 x 8 float coefficients and a float duration (cflib Poly4D.pack)."""


@dataclass
class Goal:
    """Where the planner wants the vehicle now (world frame)."""

    position: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    yaw: float
    """Heading [rad]."""


def _no_jerk_coefficients(start: np.ndarray, start_vel: np.ndarray, start_acc: np.ndarray, end: np.ndarray,
                          duration: float) -> np.ndarray:
    """Coefficients (8, n) of t^0 .. t^7 from a moving start to rest at ``duration``, zero jerk at both ends.

    At t = 0: ``start``, ``start_vel``, ``start_acc``; at t = ``duration``: ``end``, zero velocity and acceleration.
    """
    t = duration
    rows = []
    for when in (0.0, t):
        for order in range(4):  # position, velocity, acceleration, jerk
            row = np.zeros(8)
            for k in range(order, 8):
                row[k] = math.factorial(k) / math.factorial(k - order) * when ** (k - order)
            rows.append(row)
    n = len(start)
    rhs = np.vstack([start, start_vel, start_acc, np.zeros(n), end, np.zeros(n), np.zeros(n), np.zeros(n)])
    return np.asarray(np.linalg.solve(np.array(rows), rhs))


@dataclass
class _Trajectory:
    """Polynomial pieces (duration, (8, 4) coefficients of x, y, z, yaw) flown from ``t_begin``."""

    pieces: list[tuple[float, np.ndarray]]
    t_begin: float
    timescale: float = 1.0
    reversed: bool = False
    shift: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Added to every position (relative start)."""
    turn: float = 0.0
    """Rotation about z around the first point [rad] (relative yaw)."""

    @property
    def duration(self) -> float:
        return sum(d for d, _ in self.pieces) * self.timescale

    def eval(self, now: float) -> Goal:
        total = self.duration
        t = min(max(now - self.t_begin, 0.0), total)
        ended = t >= total
        if self.reversed:
            t = total - t
        ts = self.timescale
        index = 0  # the piece flown at t (the last one once it has ended)
        while index < len(self.pieces) - 1 and t > self.pieces[index][0] * ts:
            t -= self.pieces[index][0] * ts
            index += 1
        duration, coeffs = self.pieces[index]
        tau = min(t / ts, duration)
        k = np.arange(8)
        powers = tau ** k
        d1 = np.concatenate([[0.0], k[1:] * tau ** (k[1:] - 1)])
        d2 = np.concatenate([[0.0, 0.0], k[2:] * (k[2:] - 1) * tau ** (k[2:] - 2)])
        pos = powers @ coeffs
        vel = np.zeros(4) if ended else (-1.0 if self.reversed else 1.0) * (d1 @ coeffs) / ts
        acc = np.zeros(4) if ended else (d2 @ coeffs) / ts ** 2
        first = self.pieces[-1 if self.reversed else 0]
        origin = (first[1][0] if not self.reversed else _end_point(first))[:3]
        c, s = math.cos(self.turn), math.sin(self.turn)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        return Goal(rot @ (pos[:3] - origin) + origin + self.shift, rot @ vel[:3], rot @ acc[:3],
                    float(pos[3]) + self.turn)


def _end_point(piece: tuple[float, np.ndarray]) -> np.ndarray:
    duration, coeffs = piece
    return np.asarray(duration ** np.arange(8) @ coeffs)


class TrajectoryMemory:
    """The memory port (4) with its one memory, the trajectory memory: info, read and write (mem.c)."""

    def __init__(self) -> None:
        self.data = bytearray(TRAJECTORY_MEMORY_SIZE)

    def handle(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        """One memory-port packet -> the replies (channel, payload)."""
        if channel == 0 and data:
            if data[0] == 1:  # CMD_INFO_NBR
                return [(0, bytes([1, 1]))]
            if data[0] == 2 and len(data) > 1:  # CMD_INFO_DETAILS: id, type, size, 8-byte address
                if data[1] != 0:
                    return [(0, bytes([2]))]
                return [(0, bytes([2, 0, TRAJECTORY_MEMORY_TYPE]) + struct.pack("<I", len(self.data)) + bytes(8))]
            return []
        if channel in (1, 2) and len(data) >= 5:
            mem_id, addr = data[0], struct.unpack_from("<I", data, 1)[0]
            if channel == 1:  # read: id, address, length -> id, address, status, data
                length = data[5] if len(data) > 5 else 0
                ok = mem_id == 0 and addr + length <= len(self.data)
                chunk = bytes(self.data[addr:addr + length]) if ok else b""
                return [(1, data[:5] + bytes([0 if ok else EIO]) + chunk)]
            payload = data[5:]
            ok = mem_id == 0 and addr + len(payload) <= len(self.data)
            if ok:
                self.data[addr:addr + len(payload)] = payload
            return [(2, data[:5] + bytes([0 if ok else EIO]))]
        return []

    def pieces(self, offset: int, count: int) -> list[tuple[float, np.ndarray]] | None:
        """``count`` Poly4D pieces from byte ``offset`` (None: outside the memory or not finite)."""
        if count < 1 or offset + count * POLY4D_BYTES > len(self.data):
            return None
        out = []
        for i in range(count):
            values = struct.unpack_from("<33f", self.data, offset + i * POLY4D_BYTES)
            coeffs = np.array(values[:32]).reshape(4, 8).T
            if not (np.all(np.isfinite(coeffs)) and math.isfinite(values[32]) and values[32] > 0):
                return None
            out.append((float(values[32]), coeffs))
        return out


class HighLevelPlanner:
    """The planner and its port-8 commands; the firmware asks :meth:`goal` each control step."""

    def __init__(self) -> None:
        self.state = IDLE
        self.group_mask = 0
        self.commands = 0
        """Commands accepted since boot."""
        self.memory = TrajectoryMemory()
        self.definitions: dict[int, tuple[int, int, int]] = {}
        """Trajectory id -> (type, byte offset, pieces) (define_trajectory)."""
        self._trajectory: _Trajectory | None = None
        self._linear: tuple[np.ndarray, np.ndarray, float, float] | None = None
        self._last = Goal(np.zeros(3), np.zeros(3), np.zeros(3), 0.0)
        self._unsupported: set[int] = set()

    # --- queries ----------------------------------------------------------------------------------------------
    def finished(self, now: float) -> bool:
        """Whether the last planned trajectory has ended (plan_is_finished); False before the first."""
        if self._linear is not None:
            return now >= self._linear[2] + self._linear[3]
        return self._trajectory is not None and now >= self._trajectory.t_begin + self._trajectory.duration

    def goal(self, now: float, position: np.ndarray, velocity: np.ndarray, yaw: float) -> Goal | None:
        """The current goal; None when idle (the commander wants the motors off).

        ``position``/``velocity``/``yaw`` are the state estimate: the planner's starting point while it is not
        following a trajectory (crtpCommanderHighLevelGetSetpoint).
        """
        if self.state == LANDING and self.finished(now):
            self.state = IDLE
        if self.state == IDLE:
            self._last = Goal(np.array(position, dtype=float), np.array(velocity, dtype=float), np.zeros(3),
                              float(yaw))
            return None
        self._last = self._eval(now)
        return self._last

    def _eval(self, now: float) -> Goal:
        if self._linear is not None:
            start, end, t_begin, duration = self._linear
            t = min(max(now - t_begin, 0.0), duration)
            vel = (end - start) / duration if t < duration else np.zeros(4)
            point = start + t / duration * (end - start)
            return Goal(point[:3], vel[:3], np.zeros(3), float(point[3]))
        assert self._trajectory is not None  # flying or landing always has a plan
        return self._trajectory.eval(now)

    # --- commands ---------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Back to idle: motors off (plan_stop; also when a streamed setpoint pre-empts the planner)."""
        self.state = IDLE

    def handle(self, data: bytes, now: float) -> bytes:
        """One port-8 packet -> the firmware's reply (the command's first three bytes, then the result)."""
        result = self._command(data, now) if data else ENOEXEC
        if result == 0:
            self.commands += 1
        return (bytes(data[:3]) + b"\0\0\0")[:3] + bytes([result])

    def _in_group(self, group: int) -> bool:
        return group == 0 or bool(group & self.group_mask)

    def _command(self, data: bytes, now: float) -> int:
        cmd, body = data[0], data[1:]
        if cmd == p.HL_SET_GROUP_MASK:
            self.group_mask = body[0]
            return 0
        if cmd == p.HL_STOP:
            if self._in_group(body[0]):
                self.stop()
            return 0
        if cmd in (p.HL_TAKEOFF, p.HL_LAND):  # deprecated: target yaw 0
            group, height, duration = struct.unpack_from("<Bff", body)
            return self._takeoff_or_land(cmd == p.HL_TAKEOFF, group, height, 0.0, False, duration, now)
        if cmd in (p.HL_TAKEOFF_2, p.HL_LAND_2):
            group, height, yaw, use_current_yaw, duration = struct.unpack_from("<Bff?f", body)
            return self._takeoff_or_land(cmd == p.HL_TAKEOFF_2, group, height, yaw, use_current_yaw, duration, now)
        if cmd in (p.HL_GO_TO, p.HL_GO_TO_2):
            if cmd == p.HL_GO_TO:
                group, relative, x, y, z, yaw, duration = struct.unpack_from("<BBfffff", body)
                linear = False
            else:
                group, relative, linear, x, y, z, yaw, duration = struct.unpack_from("<BBBfffff", body)
            if not self._in_group(group):
                return 0
            return self._go_to(np.array([x, y, z]), yaw, duration, bool(relative), bool(linear), now)
        if cmd == p.HL_DEFINE_TRAJECTORY:
            traj_id, location, kind, offset, count = struct.unpack_from("<BBBIB", body)
            if location != 1 or traj_id >= 10:  # TRAJECTORY_LOCATION_MEM, NUM_TRAJECTORY_DEFINITIONS
                return ENOEXEC
            self.definitions[traj_id] = (kind, offset, count)
            return 0
        if cmd in (p.HL_START_TRAJECTORY, p.HL_START_TRAJECTORY_2):
            if cmd == p.HL_START_TRAJECTORY:
                group, relative, reverse, traj_id, timescale = struct.unpack_from("<BBBBf", body)
                relative_yaw = False
            else:
                group, relative, relative_yaw, reverse, traj_id, timescale = struct.unpack_from("<BBBBBf", body)
            if not self._in_group(group):
                return 0
            return self._start_trajectory(traj_id, timescale, bool(relative), bool(relative_yaw), bool(reverse), now)
        if cmd not in self._unsupported:
            self._unsupported.add(cmd)
            log.warning("high-level commander command %d is not emulated (spirals): ignored", cmd)
        return ENOEXEC

    def _takeoff_or_land(self, takeoff: bool, group: int, height: float, yaw: float, use_current_yaw: bool,
                         duration: float, now: float) -> int:
        if not self._in_group(group):
            return 0
        if not (math.isfinite(height) and math.isfinite(yaw) and math.isfinite(duration) and duration > 0):
            return EINVAL
        if (takeoff and self.state != IDLE) or (not takeoff and self.state == LANDING):
            return 1  # plan_takeoff / plan_land refuse
        start = self._last
        hover_yaw = start.yaw if use_current_yaw else yaw
        target = np.array([start.position[0], start.position[1], height])
        self._plan(start.position, start.yaw, np.zeros(3), np.zeros(3), target, hover_yaw, duration, now)
        self.state = FLYING if takeoff else LANDING
        return 0

    def _go_to(self, target: np.ndarray, yaw: float, duration: float, relative: bool, linear: bool,
               now: float) -> int:
        if not (np.all(np.isfinite(target)) and math.isfinite(yaw) and math.isfinite(duration) and duration > 0):
            return EINVAL
        start = self._last if self.state == IDLE else self._eval(now)
        if relative:
            target, yaw = target + start.position, yaw + start.yaw
        end = np.append(target, self._shortest_yaw(start.yaw, yaw))
        if linear:
            self._linear, self._trajectory = (np.append(start.position, start.yaw), end, now, float(duration)), None
        else:
            self._plan(start.position, start.yaw, start.velocity, start.acceleration, target, yaw, duration, now)
        self.state = FLYING
        return 0

    def _start_trajectory(self, traj_id: int, timescale: float, relative: bool, relative_yaw: bool, reverse: bool,
                          now: float) -> int:
        definition = self.definitions.get(traj_id)
        if definition is None or definition[0] != 0:  # undefined, or compressed (not emulated)
            return ENOEXEC
        pieces = self.memory.pieces(definition[1], definition[2])
        if pieces is None or not (math.isfinite(timescale) and timescale > 0):
            return EINVAL
        start = self._last if self.state == IDLE else self._eval(now)
        trajectory = _Trajectory(pieces, now, timescale, reverse)
        first = trajectory.eval(now)
        if relative:
            trajectory.shift = start.position - first.position
        if relative_yaw:
            trajectory.turn = start.yaw - first.yaw
        self._trajectory, self._linear = trajectory, None
        self.state = FLYING
        return 0

    @staticmethod
    def _shortest_yaw(start: float, end: float) -> float:
        return start + (end - start + math.pi) % (2 * math.pi) - math.pi

    def _plan(self, pos: np.ndarray, yaw: float, vel: np.ndarray, acc: np.ndarray, target: np.ndarray,
              target_yaw: float, duration: float, now: float) -> None:
        start = np.append(pos, yaw)
        end = np.append(target, self._shortest_yaw(yaw, target_yaw))
        coeffs = _no_jerk_coefficients(start, np.append(vel, 0.0), np.append(acc, 0.0), end, duration)
        self._trajectory, self._linear = _Trajectory([(float(duration), coeffs)], now), None
