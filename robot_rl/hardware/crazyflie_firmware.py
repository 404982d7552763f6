"""The CRTP side of an emulated Crazyflie: what the firmware answers, and the setpoints it decodes.

Enough of crazyflie-firmware's services (``src/modules/src``) that unmodified cflib connects, downloads both
TOCs, reads and writes parameters, logs, commands and e-stops it:

* link (port 15, crtpservice.c): echo, source ("Bitcraze Crazyflie"), sink; null packets answered;
* platform (13, platformservice.c): protocol version 12, firmware and device names, legacy arming;
* memory (4, mem.c): one memory, the high-level commander's trajectory memory (info, read, write);
* log (5, log.c): TOC v2 info/items with a CRC, create/append/delete/start/stop/reset blocks (v1 and v2
  start), 26-byte payload and 16-block limits, periodic data with a 24-bit ms timestamp;
* param (2, param_logic.c): TOC v2, read, write (echoed), set-by-name, default values; read-only flags;
* commander (3, crtp_commander_rpyt.c): roll/pitch/yaw/thrust with ``flightmode.stabMode*`` (rate or
  angle), the thrust lock released by a zero-thrust packet, MIN/MAX thrust;
* generic commander (7, crtp_commander_generic.c): stop, velocity world (+ legacy), hover (+ legacy),
  full state, position, manual; meta "notify setpoint stop" (the streamed setpoint drops to the
  high-level commander's priority, which takes over at once; its timestamp is set back so that, with
  ``commander.enHighLevel`` = 0, it expires after the time given: commanderNotifySetpointsStop);
* high-level commander (8): take-off, land, go-to, stop, group mask, uploaded trajectories
  (:class:`~robot_rl.hardware.crazyflie_high_level.HighLevelPlanner`), fed each control step at the lowest
  priority: a streamed setpoint (ports 3 and 7) pre-empts it and stops its planner (commander.c
  ``commanderSetSetpoint``), "notify setpoint stop" hands control back to it;
* e-stop: supervisor port 9 (emergency stop, its watchdog, arming, state bitfield), localization port 6
  (the pre-2025 path), parameter ``stabilizer.stop``;
* ``kalman.resetEstimation``: counted and cleared again, as the Kalman estimator does after a reset.

The tables of contents are :mod:`robot_rl.hardware.crazyflie_toc`'s.

Not emulated: console output, memories other than the trajectory memory (decks, Lighthouse, LEDs),
compressed high-level trajectories and spirals,
external position / localization packets, z-distance / alt-hold / CPPM setpoints (ignored, so they do not
feed the commander watchdog), persistent parameters, bootloader and radio-level packets.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from robot_rl.hardware import crazyflie_protocol as p
from robot_rl.hardware.crazyflie_high_level import IDLE, HighLevelPlanner
from robot_rl.hardware.crazyflie_toc import LOG_TOC, PARAM_TOC

__all__ = ["LOG_TOC", "PARAM_TOC", "CrazyflieFirmware", "FirmwareSetpoint"]

log = logging.getLogger(__name__)
ENOENT, E2BIG, ENOMEM, EEXIST, ENOEXEC = 2, 7, 12, 17, 8
FIRMWARE_VERSION = "2025.02+robot_rl-emulator"
DEVICE_TYPE = "CF21 (emulated)"

WDT_SHUTDOWN_S = 2.0
"""Setpoint age at which a flying vehicle's motors are cut (commander.h COMMANDER_WDT_TIMEOUT_SHUTDOWN)."""
PRIORITY_DISABLE, PRIORITY_HIGH_LEVEL, PRIORITY_CRTP = 0, 1, 2
"""Setpoint sources (commander.h): a streamed (CRTP) setpoint pre-empts the high-level commander's."""


@dataclass
class FirmwareSetpoint:
    """A decoded setpoint, in SI units and right-handed frames (what the emulated controller follows)."""

    kind: str
    """stop | position | velocity | hover | full_state | rates | attitude."""
    stamp: float
    """Arrival time [s, the emulator's clock] (the commander watchdog's reference)."""
    position: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Position [m] (position, full_state; z of hover)."""
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Velocity [m/s]: world (velocity, full_state) or body x/y (hover)."""
    acceleration: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Acceleration feed-forward [m/s^2] (full_state)."""
    yaw: float = 0.0
    """Heading [rad] (position, full_state)."""
    yaw_rate: float = 0.0
    """Yaw rate [rad/s], counter-clockwise positive (velocity, hover, rates, attitude)."""
    rates: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Body rates [rad/s] (rates; roll/pitch of attitude when an axis is in rate mode)."""
    angles: np.ndarray = field(default_factory=lambda: np.zeros(2))
    """Roll, pitch [rad] for axes in angle mode (attitude)."""
    angle_mode: tuple[bool, bool] = (False, False)
    """Whether roll, pitch are angles (attitude)."""
    pwm: float = 0.0
    """Thrust command, PWM units (rates, attitude)."""


def _c(fmt: str, value: float) -> bytes:
    """``value`` packed as a C type, integers clamped as a cast from float would saturate."""
    if fmt[-1] in "fe":
        return struct.pack(fmt, float(value))
    bits = struct.calcsize(fmt) * 8
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt[-1].islower() else (0, (1 << bits) - 1)
    return struct.pack(fmt, int(min(max(round(value), lo), hi)))


def _header(port: int, channel: int) -> int:
    return ((port & 0xF) << 4) | 0x0C | (channel & 0x3)


@dataclass
class _Block:
    ops: list[tuple[int, int]]
    """(log TOC index, fetch type id)."""
    period_ms: int = 0
    running: bool = False
    next_due: float = 0.0


class CrazyflieFirmware:
    """CRTP in, CRTP out; the vehicle reads :attr:`setpoint` and the e-stop flags, and feeds log values."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.boot = clock()
        self.log_ids = {f"{g}.{n}": i for i, (g, n, _) in enumerate(LOG_TOC)}
        self.log_types = [p.LOG_TYPE_IDS[t] for _, _, t in LOG_TOC]
        self.log_crc = p.toc_crc([(g, n, p.LOG_TYPE_IDS[t]) for g, n, t in LOG_TOC])
        self.param_types = [p.PARAM_TYPE_IDS[t] | (p.PARAM_READ_ONLY if ro else 0) for _, _, t, _, ro in PARAM_TOC]
        self.param_crc = p.toc_crc([(g, n, self.param_types[i]) for i, (g, n, _, _, _) in enumerate(PARAM_TOC)])
        self.params = {f"{g}.{n}": float(v) for g, n, _, v, _ in PARAM_TOC}
        self.param_names = list(self.params)
        self.blocks: dict[int, _Block] = {}
        self.setpoint: FirmwareSetpoint | None = None
        """The newest setpoint (None: none since boot)."""
        self.thrust_locked = True
        self.priority_disabled = True
        self.estop_requested = ""
        """Why an emergency stop was requested ("" none)."""
        self.estop_watchdog: float | None = None
        """Last emergency-stop watchdog notification (None: never armed)."""
        self.armed = True
        """CF2.x firmware arms itself (no CONFIG_MOTORS_REQUIRE_ARMING)."""
        self.info_bits = 0
        """supervisor.info, kept up to date by the vehicle."""
        self.priority = PRIORITY_DISABLE
        """Source of :attr:`setpoint` (PRIORITY_*)."""
        self.planner = HighLevelPlanner()
        self.estimator_resets = 0
        """``kalman.resetEstimation`` requests since boot."""
        self.unsupported: set[int] = set()

    # --- entry point ------------------------------------------------------------------------------------------
    def handle(self, packet: bytes) -> list[bytes]:
        """One received datagram -> the datagrams to send back (possibly none)."""
        if not packet:
            return []
        header, data = packet[0], packet[1:]
        port, channel = (header >> 4) & 0xF, header & 0x3
        handler = {p.PORT_LINK: self._link, p.PORT_PLATFORM: self._platform, p.PORT_MEM: self._mem,
                   p.PORT_LOG: self._log, p.PORT_PARAM: self._param, p.PORT_COMMANDER: self._rpyt,
                   p.PORT_GENERIC_COMMANDER: self._generic, p.PORT_LOCALIZATION: self._localization,
                   p.PORT_SUPERVISOR: self._supervisor, p.PORT_HIGH_LEVEL: self._high_level}.get(port)
        if handler is None:
            return []
        try:
            return [bytes([_header(port, ch)]) + body for ch, body in handler(channel, data)]
        except (struct.error, IndexError, ValueError) as exc:
            log.warning("malformed packet on port %d channel %d (%s): %s", port, channel, data.hex(), exc)
            return []

    def high_level_step(self, now: float, position: np.ndarray, velocity: np.ndarray, yaw: float) -> None:
        """Run the high-level commander for one control step (the state estimate: its starting point when idle).

        Its setpoint replaces :attr:`setpoint` unless a streamed one has priority; with
        ``commander.enHighLevel`` = 0 it feeds nothing.
        """
        if not self.params["commander.enHighLevel"]:
            return
        goal = self.planner.goal(now, position, velocity, yaw)
        if self.priority > PRIORITY_HIGH_LEVEL:
            return
        if goal is None:  # idle: the commander wants the motors off
            self.setpoint = FirmwareSetpoint("stop", now)
        else:
            self.setpoint = FirmwareSetpoint("full_state", now, position=goal.position, velocity=goal.velocity,
                                             acceleration=goal.acceleration, yaw=goal.yaw)
        self.priority = PRIORITY_HIGH_LEVEL

    def high_level_bits(self, now: float) -> int:
        """The high-level commander's supervisor.info bits (active, trajectory finished, disabled)."""
        if not self.params["commander.enHighLevel"]:
            return p.SUP_HL_DISABLED
        bits = p.SUP_HL_TRAJ_FINISHED if self.planner.finished(now) else 0
        if self.priority == PRIORITY_HIGH_LEVEL and self.planner.state != IDLE:
            bits |= p.SUP_HL_ACTIVE
        return bits

    def _stream(self, sp: FirmwareSetpoint) -> None:
        """A streamed setpoint: it takes priority and stops the high-level planner.

        Raises:
            ValueError: for a NaN or infinite field (refused, the previous setpoint stays in force), which
                the emulated controller could not follow.
        """
        values = np.concatenate([sp.position, sp.velocity, sp.acceleration, sp.rates, sp.angles,
                                 [sp.yaw, sp.yaw_rate, sp.pwm]])
        if not np.all(np.isfinite(values)):
            raise ValueError(f"non-finite {sp.kind} setpoint refused")
        self.setpoint = sp
        self.priority = PRIORITY_CRTP
        self.planner.stop()

    def due_log_packets(self, values: dict[str, float]) -> list[bytes]:
        """Log data of every running block whose period has elapsed (``values``: name -> current value)."""
        now = self.clock()
        out = []
        ms = int((now - self.boot) * 1000) & 0xFFFFFF
        for block_id, block in self.blocks.items():
            if not block.running or now < block.next_due:
                continue
            block.next_due = max(block.next_due + block.period_ms / 1000.0, now - block.period_ms / 1000.0)
            body = bytes([block_id]) + ms.to_bytes(3, "little")
            for index, fetch in block.ops:
                g, n, _ = LOG_TOC[index]
                body += _c(p.LOG_TYPE_FORMATS[fetch], values.get(f"{g}.{n}", 0.0))
            out.append(bytes([_header(p.PORT_LOG, 2)]) + body)
        return out

    # --- services ---------------------------------------------------------------------------------------------
    def _link(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == 0:
            return [(0, data)]
        if channel == 1:
            return [(1, b"Bitcraze Crazyflie".ljust(30, b"\0"))]
        return [(3, b"")] if channel == 3 else []

    def _platform(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == 1 and data:
            if data[0] == 0:
                return [(1, bytes([0]) + struct.pack("<i", p.PROTOCOL_VERSION))]
            if data[0] in (1, 2):
                text = FIRMWARE_VERSION if data[0] == 1 else DEVICE_TYPE
                return [(1, bytes([data[0]]) + text.encode()[:29])]
        if channel == 0 and data:
            if data[0] == 1:  # legacy arming request
                self.armed = bool(data[1]) if len(data) > 1 else self.armed
                return [(0, bytes([1, 1, int(self.armed)]))]
            if data[0] == 2:
                return [(0, bytes([2, 0, 1]))]
            return [(0, data)]
        return []

    def _mem(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        return self.planner.memory.handle(channel, data)  # the one memory: the trajectory memory

    def _log(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == 0:
            if data[0] == 3:
                return [(0, struct.pack("<BHIBB", 3, len(LOG_TOC), self.log_crc, 16, 128))]
            if data[0] == 2:
                (ident,) = struct.unpack_from("<H", data, 1)
                if ident >= len(LOG_TOC):
                    return [(0, bytes([2]))]
                g, n, _ = LOG_TOC[ident]
                return [(0, struct.pack("<BHB", 2, ident, self.log_types[ident]) + f"{g}\0{n}\0".encode())]
            return []
        if channel != 1:
            return []
        cmd = data[0]
        block_id = data[1] if len(data) > 1 else 0
        if cmd == 5:
            self.blocks.clear()
            return [(1, bytes([5, block_id, 0]))]
        return [(1, bytes([cmd, block_id, self._log_control(cmd, block_id, data)]))]

    def _log_control(self, cmd: int, block_id: int, data: bytes) -> int:
        if cmd in (6, 7, 0, 1):  # create / append, v2 and v1
            if cmd in (6, 0):
                if block_id in self.blocks:
                    return EEXIST
                if len(self.blocks) >= 16:
                    return ENOMEM
            elif block_id not in self.blocks:
                return ENOENT
            ops, size = [], 3 if cmd in (6, 7) else 2
            for k in range(2, len(data) - size + 1, size):
                ident = struct.unpack_from("<H", data, k + 1)[0] if size == 3 else data[k + 1]
                if ident >= len(LOG_TOC):
                    return ENOENT
                ops.append((ident, data[k] & 0x0F))
            block = self.blocks.get(block_id, _Block([]))
            if sum(struct.calcsize(p.LOG_TYPE_FORMATS[f]) for _, f in block.ops + ops) > 26:
                return E2BIG
            block.ops += ops
            self.blocks[block_id] = block
            return 0
        running = self.blocks.get(block_id)
        if running is None:
            return ENOENT
        block = running
        if cmd in (3, 8):
            period = data[2] * 10 if cmd == 3 else struct.unpack_from("<H", data, 2)[0]
            block.period_ms, block.running, block.next_due = max(int(period), 1), True, self.clock()
        elif cmd == 4:
            block.running = False
        elif cmd == 2:
            del self.blocks[block_id]
        else:
            return ENOEXEC
        return 0

    def _param(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == 0:
            if data[0] == 3:
                return [(0, struct.pack("<BHI", 3, len(PARAM_TOC), self.param_crc))]
            if data[0] == 2:
                (ident,) = struct.unpack_from("<H", data, 1)
                if ident >= len(PARAM_TOC):
                    return [(0, bytes([2]))]
                g, n = PARAM_TOC[ident][:2]
                return [(0, struct.pack("<BHB", 2, ident, self.param_types[ident]) + f"{g}\0{n}\0".encode())]
            return []
        if channel == 3:
            return self._param_misc(data)
        (ident,) = struct.unpack_from("<H", data, 0)
        if ident >= len(PARAM_TOC):
            return [(channel, data[:2] + bytes([ENOENT]))]
        fmt = p.PARAM_TYPE_FORMATS[self.param_types[ident] & 0x0F]
        if channel == 1:
            return [(1, data[:2] + b"\0" + _c(fmt, self.params[self.param_names[ident]]))]
        if channel == 2 and not self.param_types[ident] & p.PARAM_READ_ONLY:
            value = struct.unpack_from(fmt, data, 2)[0]
            self._set_param(ident, value)
            return [(2, data[:2] + _c(fmt, value))]  # param_logic.c echoes the value written
        return []

    def _param_misc(self, data: bytes) -> list[tuple[int, bytes]]:
        cmd = data[0]
        if cmd == 0:  # set by name: group\0name\0 type value
            group_end = data.index(0, 1)
            name_end = data.index(0, group_end + 1)
            name = f"{data[1:group_end].decode()}.{data[group_end + 1:name_end].decode()}"
            prefix = data[:name_end + 1]
            if name not in self.params:
                return [(3, prefix + bytes([ENOENT]))]
            ident = self.param_names.index(name)
            if data[name_end + 1] != self.param_types[ident] & 0x0F:
                return [(3, prefix + bytes([22]))]  # EINVAL
            self._set_param(ident, struct.unpack_from(p.PARAM_TYPE_FORMATS[data[name_end + 1]], data, name_end + 2)[0])
            return [(3, prefix + b"\0")]
        if cmd in (7, 8):  # extended type / default value, v2 replies
            (ident,) = struct.unpack_from("<H", data, 1)
            if ident >= len(PARAM_TOC):
                return [(3, data[:3] + bytes([ENOENT]))]
            if cmd == 7:
                return [(3, data[:3] + bytes([0, 0]))]
            fmt = p.PARAM_TYPE_FORMATS[self.param_types[ident] & 0x0F]
            return [(3, data[:3] + b"\0" + _c(fmt, PARAM_TOC[ident][3]))]
        return []

    def _set_param(self, ident: int, value: float) -> None:
        name = self.param_names[ident]
        self.params[name] = float(value)
        if name == "stabilizer.stop" and value:
            self.estop_requested = "parameter stabilizer.stop"
        if name == "kalman.resetEstimation" and value:
            self.estimator_resets += 1  # the exact estimate needs no reset; the flag clears as after one
            self.params[name] = 0.0

    def _rpyt(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel != 0:
            return []
        roll, pitch, yaw, raw = struct.unpack_from("<fffH", data, 0)
        if self.priority_disabled:
            self.thrust_locked = True
        if raw == 0:
            self.thrust_locked = False
        self.priority_disabled = False
        pwm = 0.0 if self.thrust_locked or raw < p.RPYT_MIN_THRUST else float(min(raw, p.RPYT_MAX_THRUST))
        rate_roll = self.params["flightmode.stabModeRoll"] == 0
        rate_pitch = self.params["flightmode.stabModePitch"] == 0
        body = p.rpyt_packet_to_rates(roll, pitch, yaw)
        sp = FirmwareSetpoint("rates" if rate_roll and rate_pitch else "attitude", self.clock(), pwm=pwm,
                              rates=body, yaw_rate=float(body[2]))
        sp.angles = np.radians([roll, -pitch])  # cflib packs -pitch: back to right-handed (nose down positive)
        sp.angle_mode = (not rate_roll, not rate_pitch)
        self._stream(sp)
        return []

    def _generic(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == 1:  # meta: notify setpoint stop -> the high-level commander may take over
            if data and data[0] == p.META_NOTIFY_SETPOINT_STOP:
                remain_ms = struct.unpack_from("<I", data, 1)[0] if len(data) >= 5 else 0
                if self.setpoint is not None and self.priority == PRIORITY_CRTP:
                    self.setpoint.stamp = self.clock() - max(0.0, WDT_SHUTDOWN_S - remain_ms / 1000.0)
                self.priority = min(self.priority, PRIORITY_HIGH_LEVEL)
            return []
        if channel != 0 or not data:
            return []
        kind, body, now = data[0], data[1:], self.clock()
        if kind == p.TYPE_STOP:
            sp = FirmwareSetpoint("stop", now)
        elif kind in (p.TYPE_POSITION,):
            x, y, z, yaw = struct.unpack_from("<ffff", body)
            sp = FirmwareSetpoint("position", now, position=np.array([x, y, z]), yaw=math.radians(yaw))
        elif kind in (p.TYPE_VELOCITY_WORLD, p.TYPE_VELOCITY_WORLD_LEGACY):
            vx, vy, vz, yaw_rate = struct.unpack_from("<ffff", body)
            sign = -1.0 if kind == p.TYPE_VELOCITY_WORLD_LEGACY else 1.0
            sp = FirmwareSetpoint("velocity", now, velocity=np.array([vx, vy, vz]),
                                  yaw_rate=sign * math.radians(yaw_rate))
        elif kind in (p.TYPE_HOVER, p.TYPE_HOVER_LEGACY):
            vx, vy, yaw_rate, z = struct.unpack_from("<ffff", body)
            sign = -1.0 if kind == p.TYPE_HOVER_LEGACY else 1.0
            sp = FirmwareSetpoint("hover", now, position=np.array([0.0, 0.0, z]), velocity=np.array([vx, vy, 0.0]),
                                  yaw_rate=sign * math.radians(yaw_rate))
        elif kind == p.TYPE_FULL_STATE:
            v = struct.unpack_from("<hhhhhhhhhIhhh", body)
            qx, qy, qz, qw = p.quat_decompress(v[9])
            sp = FirmwareSetpoint("full_state", now, position=np.array(v[0:3]) / 1000.0,
                                  velocity=np.array(v[3:6]) / 1000.0, acceleration=np.array(v[6:9]) / 1000.0,
                                  yaw=math.atan2(2 * (qw * qz + qx * qy), 1 - 2 * (qy * qy + qz * qz)))
        elif kind == p.TYPE_MANUAL:
            roll, pitch, yaw_rate, thrust, rate = struct.unpack_from("<fffHB", body)
            rates = np.radians([roll, -pitch, yaw_rate])
            sp = FirmwareSetpoint("rates" if rate else "attitude", now, rates=rates, yaw_rate=float(rates[2]),
                                  pwm=float(thrust), angles=np.radians([roll, -pitch]),
                                  angle_mode=(not rate, not rate))
        else:
            if kind not in self.unsupported:
                self.unsupported.add(kind)
                log.warning("generic commander setpoint type %d is not emulated: ignored", kind)
            return []
        self.priority_disabled = False
        self._stream(sp)
        return []

    def _localization(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if channel == p.LOC_GENERIC_CHANNEL and data:
            if data[0] == p.LOC_EMERGENCY_STOP:
                self.estop_requested = "emergency stop (localization port)"
            elif data[0] == p.LOC_EMERGENCY_STOP_WATCHDOG:
                self.estop_watchdog = self.clock()
        return []

    def _supervisor(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        if not data:
            return []
        cmd = data[0]
        if channel == p.SUP_CH_INFO and cmd == p.SUP_GET_BITFIELD:
            return [(0, bytes([0x80 | cmd]) + struct.pack("<H", self.info_bits))]
        if channel != p.SUP_CH_COMMAND:
            return []
        if cmd == p.SUP_EMERGENCY_STOP:
            self.estop_requested = "emergency stop (supervisor port)"
        elif cmd == p.SUP_EMERGENCY_STOP_WATCHDOG:
            self.estop_watchdog = self.clock()
        elif cmd == p.SUP_ARM:
            if self.info_bits & p.SUP_IS_LOCKED:  # a locked vehicle stays disarmed until rebooted
                return [(1, bytes([0x80 | cmd, 0, 0]))]
            self.armed = bool(data[1]) if len(data) > 1 else self.armed
            return [(1, bytes([0x80 | cmd, 1, int(self.armed)]))]
        elif cmd == p.SUP_RECOVER:
            return [(1, bytes([0x80 | cmd, 0, 1]))]  # crashes are not emulated: nothing to recover from
        return []

    def _high_level(self, channel: int, data: bytes) -> list[tuple[int, bytes]]:
        return [(channel, self.planner.handle(data, self.clock()))]
