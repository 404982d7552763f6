"""The Crazyflie's wire conventions, shared by the cflib link and the emulator (no cflib, no I/O).

What the bridge and the emulated firmware must agree on, each taken from Bitcraze's sources
(crazyflie-firmware ``src/modules/src``, crazyflie-lib-python ``cflib/crazyflie``):

* CRTP ports and channels (``crtp.h``); one datagram per packet over UDP (``cflib/crtp/udpdriver.py``).
* The state stream: one log block of ``stateEstimateZ`` (the firmware's compressed state estimate: mm, mm/s,
  a 32-bit "smallest three" quaternion, mrad/s body rates with the legacy inverted pitch, ``stabilizer.c``)
  plus ``pm.vbat``: 26 bytes, exactly one log packet, so every sample is one consistent instant.
* Body rates through the classic commander (port 3) in rate mode (``flightmode.stabModeRoll/Pitch = 0``,
  ``crtp_commander_rpyt.c``): cflib packs ``-pitch`` and the firmware inverts the legacy yaw rate, so a
  right-handed (x forward, y left, z up) body rate (p, q, r) is sent as roll = p, pitch = q, yawrate = -r
  [deg/s]. Thrust is PWM 0..65535 (the firmware caps at 60000 and cuts below 1000).
* Thrust [N] <-> PWM through the cf2x model's rotor limit (:data:`robot_rl.robots.cf2x.THRUST_MAX` at full
  PWM) and a :class:`~robot_rl.control.quadrotor.ThrustCurve` whose quadratic share comes from Förster's
  system identification of the Crazyflie 2.0 (ETH Zurich, 2015: f = 2.13e-11 pwm^2 + 1.03e-6 pwm + 5.5e-4).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from robot_rl.control.base import RobotState
from robot_rl.control.quadrotor import ThrustCurve
from robot_rl.robots import cf2x

# --- CRTP ports (crtp.h) and channels -------------------------------------------------------------------------
PORT_CONSOLE, PORT_PARAM, PORT_COMMANDER, PORT_MEM, PORT_LOG = 0x0, 0x2, 0x3, 0x4, 0x5
PORT_LOCALIZATION, PORT_GENERIC_COMMANDER, PORT_HIGH_LEVEL, PORT_SUPERVISOR = 0x6, 0x7, 0x8, 0x9
PORT_PLATFORM, PORT_LINK = 0xD, 0xF
PROTOCOL_VERSION = 12
"""CRTP protocol version the emulator reports (crtp.h of the 2025 firmware; >= 12 has the supervisor port)."""

# Generic commander (crtp_commander_generic.c) setpoint types and the meta command.
TYPE_STOP, TYPE_VELOCITY_WORLD_LEGACY, TYPE_HOVER_LEGACY, TYPE_FULL_STATE, TYPE_POSITION = 0, 1, 5, 6, 7
TYPE_VELOCITY_WORLD, TYPE_HOVER, TYPE_MANUAL = 8, 10, 11
META_NOTIFY_SETPOINT_STOP = 0
# Localization port generic channel (crtp_localization_service.c): the pre-supervisor e-stop path.
LOC_GENERIC_CHANNEL, LOC_EMERGENCY_STOP, LOC_EMERGENCY_STOP_WATCHDOG = 1, 3, 4
# Supervisor port (crtp_supervisor.c).
SUP_CH_INFO, SUP_CH_COMMAND = 0, 1
SUP_ARM, SUP_RECOVER, SUP_EMERGENCY_STOP, SUP_EMERGENCY_STOP_WATCHDOG, SUP_GET_BITFIELD = 0x01, 0x02, 0x03, 0x04, 0x0C
# supervisor.info bits (supervisor.h, cflib/crazyflie/supervisor.py).
SUP_CAN_BE_ARMED, SUP_IS_ARMED, SUP_AUTO_ARMED, SUP_CAN_FLY, SUP_IS_FLYING = 0x001, 0x002, 0x004, 0x008, 0x010
SUP_IS_TUMBLED, SUP_IS_LOCKED, SUP_IS_CRASHED = 0x020, 0x040, 0x080
SUP_HL_ACTIVE, SUP_HL_TRAJ_FINISHED, SUP_HL_DISABLED = 0x100, 0x200, 0x400
# High-level commander commands (crtp_commander_high_level.c, cflib/crazyflie/high_level_commander.py).
HL_SET_GROUP_MASK, HL_TAKEOFF, HL_LAND, HL_STOP, HL_GO_TO = 0, 1, 2, 3, 4
HL_START_TRAJECTORY, HL_DEFINE_TRAJECTORY, HL_TAKEOFF_2, HL_LAND_2 = 5, 6, 7, 8
HL_GO_TO_2, HL_START_TRAJECTORY_2 = 12, 13

PWM_MAX = 65535
"""Full-scale thrust command."""
RPYT_MIN_THRUST = 1000
"""Below this the firmware's classic commander sends zero thrust (crtp_commander_rpyt.c MIN_THRUST)."""
RPYT_MAX_THRUST = 60000
"""The classic commander caps thrust here (crtp_commander_rpyt.c MAX_THRUST)."""
FORSTER_QUADRATIC = 0.5748
"""Share of the quadratic term in Förster's PWM -> thrust fit at full PWM (2.13e-11 * 65535^2 over the
sum of its quadratic and linear terms); the curve is scaled so full PWM gives ``cf2x.THRUST_MAX``."""

STATE_LOG_VARIABLES: tuple[tuple[str, str], ...] = (
    ("stateEstimateZ.x", "int16_t"), ("stateEstimateZ.y", "int16_t"), ("stateEstimateZ.z", "int16_t"),
    ("stateEstimateZ.vx", "int16_t"), ("stateEstimateZ.vy", "int16_t"), ("stateEstimateZ.vz", "int16_t"),
    ("stateEstimateZ.quat", "uint32_t"),
    ("stateEstimateZ.rateRoll", "int16_t"), ("stateEstimateZ.ratePitch", "int16_t"),
    ("stateEstimateZ.rateYaw", "int16_t"),
    ("pm.vbat", "float"),
)
"""The one log block of the state stream (name, C type), 26 bytes: the most a log packet carries."""
LOG_TYPE_IDS = {"uint8_t": 1, "uint16_t": 2, "uint32_t": 3, "int8_t": 4, "int16_t": 5, "int32_t": 6,
                "float": 7, "FP16": 8}
"""Log variable type ids (log.h; cflib LogTocElement.types)."""
LOG_TYPE_FORMATS = {1: "<B", 2: "<H", 3: "<I", 4: "<b", 5: "<h", 6: "<i", 7: "<f", 8: "<e"}
PARAM_TYPE_IDS = {"int8_t": 0x00, "int16_t": 0x01, "int32_t": 0x02, "float": 0x06, "uint8_t": 0x08,
                  "uint16_t": 0x09, "uint32_t": 0x0A}
"""Parameter type ids (param.h; cflib ParamTocElement.types); 0x40 marks read-only."""
PARAM_TYPE_FORMATS = {0x00: "<b", 0x01: "<h", 0x02: "<i", 0x06: "<f", 0x08: "<B", 0x09: "<H", 0x0A: "<I"}
PARAM_READ_ONLY = 0x40


@dataclass(frozen=True)
class ThrustMap:
    """Collective thrust [N] <-> the firmware's PWM thrust command (the same PWM on all four motors)."""

    thrust_max: float = cf2x.THRUST_MAX
    """Per-rotor thrust at full PWM [N]."""
    quadratic: float = FORSTER_QUADRATIC
    """Quadratic share of the thrust curve (1: thrust ∝ pwm^2)."""

    @property
    def curve(self) -> ThrustCurve:
        """The per-rotor curve over u = pwm / 65535."""
        return ThrustCurve(self.thrust_max, self.quadratic)

    def pwm(self, collective: float) -> int:
        """PWM that makes four rotors produce ``collective`` newtons (clipped to 0..65535)."""
        u = float(self.curve.command(np.array(collective / 4.0)))
        return round(min(max(u, 0.0), 1.0) * PWM_MAX)

    def collective(self, pwm: float) -> float:
        """Collective thrust [N] of four rotors at ``pwm``."""
        return 4.0 * float(self.curve.thrust(np.array(pwm / PWM_MAX)))


def rates_to_rpyt(rates: np.ndarray) -> tuple[float, float, float]:
    """Right-handed body rates [rad/s] -> cflib ``send_setpoint`` (roll, pitch, yawrate) [deg/s] in rate mode."""
    p, q, r = (math.degrees(float(v)) for v in rates)
    return p, q, -r


def rpyt_packet_to_rates(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """The three floats of a port-3 packet (as cflib packed them) -> right-handed body rates [rad/s].

    cflib packs ``-pitch``, the firmware takes ``attitudeRate.pitch = packet.pitch`` against ``-gyro.y`` and
    ``attitudeRate.yaw = -packet.yaw`` against ``gyro.z`` (controller_pid.c).
    """
    return np.radians([roll, -pitch, -yaw])


@dataclass
class StateSample:
    """One state estimate as the bridge receives it (world frame, right-handed, SI units)."""

    stamp: float
    """Host monotonic time of arrival [s]."""
    position: np.ndarray
    """Position [m]."""
    velocity: np.ndarray
    """Velocity in the world frame [m/s]."""
    quat: np.ndarray
    """Orientation (w, x, y, z)."""
    rates: np.ndarray
    """Body rates [rad/s] (x forward, y left, z up)."""
    vbat: float = float("nan")
    """Battery voltage [V]."""
    vehicle_ms: int = 0
    """The firmware's log timestamp [ms since boot, 24 bits]."""

    def to_robot_state(self) -> RobotState:
        """As the controllers and :mod:`robot_rl.ros.odometry` take a floating base."""
        return RobotState(np.zeros(0), np.zeros(0), self.stamp, self.position, self.quat, self.velocity, self.rates)

    @property
    def yaw(self) -> float:
        """Heading [rad]."""
        w, x, y, z = self.quat
        return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quat_compress(q_xyzw: np.ndarray) -> int:
    """The firmware's 32-bit "smallest three" quaternion (quatcompress.h): 2 bits index, 3 x (sign + 9 bits)."""
    q = np.asarray(q_xyzw, dtype=np.float64)
    q = q / np.linalg.norm(q)
    largest = int(np.argmax(np.abs(q)))
    negate = q[largest] < 0
    comp = largest
    for i in range(4):
        if i != largest:
            negbit = int((q[i] < 0) ^ negate)
            mag = int(((1 << 9) - 1) * (abs(q[i]) / math.sqrt(0.5)) + 0.5)
            comp = (comp << 10) | (negbit << 9) | mag
    return comp


def quat_decompress(comp: int) -> np.ndarray:
    """Inverse of :func:`quat_compress`: (x, y, z, w)."""
    q = np.zeros(4)
    mask = (1 << 9) - 1
    largest = comp >> 30
    total = 0.0
    for i in range(3, -1, -1):
        if i != largest:
            mag, neg = comp & mask, (comp >> 9) & 1
            comp >>= 10
            q[i] = (-1 if neg else 1) * mag / mask * math.sqrt(0.5)
            total += q[i] * q[i]
    q[largest] = math.sqrt(max(0.0, 1.0 - total))
    return q


def _int16(value: float) -> int:
    return int(min(max(round(value), -32768), 32767))


def encode_state(position: np.ndarray, velocity: np.ndarray, quat_wxyz: np.ndarray, rates: np.ndarray,
                 vbat: float) -> dict[str, float]:
    """Firmware side: the values of :data:`STATE_LOG_VARIABLES` for a state (as stabilizer.c compresses it)."""
    w, x, y, z = (float(v) for v in quat_wxyz)
    out: dict[str, float] = {f"stateEstimateZ.{k}": _int16(1000.0 * v) for k, v in zip("xyz", position)}
    out.update({f"stateEstimateZ.v{k}": _int16(1000.0 * v) for k, v in zip("xyz", velocity)})
    out["stateEstimateZ.quat"] = quat_compress(np.array([x, y, z, w]))
    out["stateEstimateZ.rateRoll"] = _int16(1000.0 * rates[0])
    out["stateEstimateZ.ratePitch"] = _int16(-1000.0 * rates[1])  # legacy inverted pitch
    out["stateEstimateZ.rateYaw"] = _int16(1000.0 * rates[2])
    out["pm.vbat"] = float(vbat)
    return out


def decode_state(values: dict[str, float], stamp: float, vehicle_ms: int = 0) -> StateSample:
    """Bridge side: a log block's values -> :class:`StateSample` (quaternion via :func:`quat_decompress`)."""
    g = values.get
    x, y, z, w = quat_decompress(int(values["stateEstimateZ.quat"]))
    return StateSample(
        stamp=stamp,
        position=np.array([g("stateEstimateZ.x", 0), g("stateEstimateZ.y", 0), g("stateEstimateZ.z", 0)]) / 1000.0,
        velocity=np.array([g("stateEstimateZ.vx", 0), g("stateEstimateZ.vy", 0), g("stateEstimateZ.vz", 0)]) / 1000.0,
        quat=np.array([w, x, y, z]),
        rates=np.array([g("stateEstimateZ.rateRoll", 0), -g("stateEstimateZ.ratePitch", 0),
                        g("stateEstimateZ.rateYaw", 0)]) / 1000.0,
        vbat=float(g("pm.vbat", float("nan"))), vehicle_ms=vehicle_ms)


def toc_crc(entries: list[tuple[str, str, int]]) -> int:
    """A CRC-32 over (group, name, type) chained as log.c / param_logic.c do: a TOC's identity for caches."""
    crc = 0
    for group, name, type_id in entries:
        crc = zlib.crc32(crc.to_bytes(4, "little") + bytes([type_id]) + f"{group}.{name}".encode())
    return crc
