# mypy: disable-error-code="valid-type,type-arg"
"""Unitree's low-level DDS messages (``unitree_hg``: G1, H1-2) and their CRC, spoken with Cyclone DDS directly.

A Unitree humanoid's motor controller listens on ``rt/lowcmd`` and publishes ``rt/lowstate`` over Cyclone DDS;
the messages are the IDL types of unitree_sdk2 (C++) / unitree_sdk2_python (github.com/unitreerobotics), and
a command is only executed when its ``crc`` field is Unitree's CRC32 of the struct's memory image.

Why cyclonedds here and not Unitree's SDK: the ``unitree_sdk2`` wheel on PyPI fails at import, and
``far-unitree-sdk`` is a 12 MB C++ build; unitree_sdk2_python itself is a thin layer over the ``cyclonedds``
Python package with exactly these IDL types (``ChannelFactoryInitialize`` = a Cyclone ``Domain`` with an
interface config + a participant; channels = topics with default QoS). Declaring the same types (same
module path as typename, field names, order, types, ``@final``) with cyclonedds is therefore byte-compatible
with the robot: same topic names, same XTypes type information, same CDR on the wire.

The IDL's ``octet`` members are declared ``types.byte`` (XTypes TK_BYTE), not ``types.uint8`` (TK_UINT8, which
unitree_sdk2_python uses): with uint8 the type objects differ from what Unitree's idlc-generated C++ code
(Cyclone 0.10.x) carries, so a 0.10.x peer does not know our type identifiers, asks for the type objects, finds
TK_UINT8 (an XTypes 1.3 kind it does not support) and fails ("ddsi_xt_type_init_impl with invalid type
object"; far-unitree-sdk 0.1.8 then crashes). With ``byte`` our TypeInformation and TypeMapping are byte for byte
those in far-unitree-sdk's compiled unitree_hg types (checked in tests/test_vendor_unitree_sdk.py).

Message families: G1 and H1-2 use ``unitree_hg`` (35 motor slots, ``mode_pr``/``mode_machine``). The original
H1 (and Go2/B2) use ``unitree_go`` (``unitree_go.msg.dds_.LowCmd_``: head, level_flag, 20 motor_cmd, bms,
wireless_remote, led, fan, gpio, crc; LowState_ with foot_force): not declared here (this package has no H1
model to emulate it with). ``unitree_hg`` LowState has no foot force; G1 reports contact only through its
optional pressure sensors (``PressSensorState_``, another topic).

The CRC: unitree_sdk2's ``crc32_core`` runs CRC-32 (poly 0x04C11DB7, init 0xFFFFFFFF, no reflection, no
final xor: the CRC-32/MPEG-2 parameters) over the struct's memory image as 32-bit little-endian words, each
word fed most significant bit first, all words but the last (the crc itself). The memory image is the C
layout with natural alignment, which is not the CDR stream (CDR does not pad a struct to its alignment), so
it is rebuilt here with numpy aligned dtypes (sizes 1004 and 2092 bytes, as the SDK's pack formats say).
"""

# No `from __future__ import annotations`: cyclonedds resolves the field annotations at runtime (they are IDL
# types, not PEP 484 ones, hence the mypy codes disabled above; messages are handled as Any below).
import fcntl
import socket
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types
import numpy as np

LOWCMD_TOPIC = "rt/lowcmd"
LOWSTATE_TOPIC = "rt/lowstate"
NUM_MOTORS = 35
"""Motor slots of a ``unitree_hg`` message (G1 29-DoF uses 0..28)."""
MODE_PR = 0
"""``mode_pr``: ankle joints commanded as pitch/roll (series); 1 = A/B (parallel motors)."""
MOTOR_ENABLE = 1
"""``motor_cmd[i].mode``: 1 = motor enabled (PD + torque), 0 = disabled (no torque)."""


@dataclass
@annotate.final
@annotate.autoid("sequential")
class MotorCmd_(idl.IdlStruct, typename="unitree_hg.msg.dds_.MotorCmd_"):
    """One motor's command: ``tau = kp (q - q_m) + kd (dq - dq_m) + tau``."""

    mode: types.byte
    q: types.float32
    dq: types.float32
    tau: types.float32
    kp: types.float32
    kd: types.float32
    reserve: types.uint32


@dataclass
@annotate.final
@annotate.autoid("sequential")
class MotorState_(idl.IdlStruct, typename="unitree_hg.msg.dds_.MotorState_"):
    """One motor's measured state."""

    mode: types.byte
    q: types.float32
    dq: types.float32
    ddq: types.float32
    tau_est: types.float32
    temperature: types.array[types.int16, 2]
    vol: types.float32
    sensor: types.array[types.uint32, 2]
    motorstate: types.uint32
    reserve: types.array[types.uint32, 4]


@dataclass
@annotate.final
@annotate.autoid("sequential")
class IMUState_(idl.IdlStruct, typename="unitree_hg.msg.dds_.IMUState_"):
    """Pelvis IMU: quaternion (w, x, y, z), gyroscope [rad/s], accelerometer [m/s^2], rpy [rad], temperature."""

    quaternion: types.array[types.float32, 4]
    gyroscope: types.array[types.float32, 3]
    accelerometer: types.array[types.float32, 3]
    rpy: types.array[types.float32, 3]
    temperature: types.int16


@dataclass
@annotate.final
@annotate.autoid("sequential")
class LowCmd_(idl.IdlStruct, typename="unitree_hg.msg.dds_.LowCmd_"):
    """``rt/lowcmd``: 35 motor commands, the ankle mode, the robot type echoed, and the CRC."""

    mode_pr: types.byte
    mode_machine: types.byte
    motor_cmd: types.array[MotorCmd_, NUM_MOTORS]
    reserve: types.array[types.uint32, 4]
    crc: types.uint32


@dataclass
@annotate.final
@annotate.autoid("sequential")
class LowState_(idl.IdlStruct, typename="unitree_hg.msg.dds_.LowState_"):
    """``rt/lowstate``: motor states, IMU, remote bytes, tick [ms] and the CRC."""

    version: types.array[types.uint32, 2]
    mode_pr: types.byte
    mode_machine: types.byte
    tick: types.uint32
    imu_state: IMUState_
    motor_state: types.array[MotorState_, NUM_MOTORS]
    wireless_remote: types.array[types.byte, 40]
    reserve: types.array[types.uint32, 4]
    crc: types.uint32


_LowCmd: Any = LowCmd_
_LowState: Any = LowState_
_MotorState: Any = MotorState_


# --- the C memory images the CRC is computed over ------------------------------------------------------------
MOTOR_CMD_C = np.dtype([("mode", "u1"), ("q", "<f4"), ("dq", "<f4"), ("tau", "<f4"), ("kp", "<f4"),
                        ("kd", "<f4"), ("reserve", "<u4")], align=True)
LOWCMD_C = np.dtype([("mode_pr", "u1"), ("mode_machine", "u1"), ("motor_cmd", MOTOR_CMD_C, (NUM_MOTORS,)),
                     ("reserve", "<u4", (4,)), ("crc", "<u4")], align=True)
MOTOR_STATE_C = np.dtype([("mode", "u1"), ("q", "<f4"), ("dq", "<f4"), ("ddq", "<f4"), ("tau_est", "<f4"),
                          ("temperature", "<i2", (2,)), ("vol", "<f4"), ("sensor", "<u4", (2,)),
                          ("motorstate", "<u4"), ("reserve", "<u4", (4,))], align=True)
IMU_STATE_C = np.dtype([("quaternion", "<f4", (4,)), ("gyroscope", "<f4", (3,)), ("accelerometer", "<f4", (3,)),
                        ("rpy", "<f4", (3,)), ("temperature", "<i2")], align=True)
LOWSTATE_C = np.dtype([("version", "<u4", (2,)), ("mode_pr", "u1"), ("mode_machine", "u1"), ("tick", "<u4"),
                       ("imu_state", IMU_STATE_C), ("motor_state", MOTOR_STATE_C, (NUM_MOTORS,)),
                       ("wireless_remote", "u1", (40,)), ("reserve", "<u4", (4,)), ("crc", "<u4")], align=True)
assert (LOWCMD_C.itemsize, LOWSTATE_C.itemsize) == (1004, 2092)  # sizeof() in unitree_sdk2

_POLY = 0x04C11DB7


def crc32_core(words: list[int] | np.ndarray) -> int:
    """Line-by-line port of unitree_sdk2's bitwise ``crc32_core(uint32_t* ptr, uint32_t len)`` (slow; reference)."""
    crc = 0xFFFFFFFF
    for word in (int(w) for w in words):
        xbit = 1 << 31
        for _ in range(32):
            crc = ((crc << 1) ^ _POLY) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
            if word & xbit:
                crc ^= _POLY
            xbit >>= 1
    return crc


def _byte_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for b in range(256):
        c = b << 24
        for _ in range(8):
            c = ((c << 1) ^ _POLY) & 0xFFFFFFFF if c & 0x80000000 else (c << 1) & 0xFFFFFFFF
        table[b] = c
    return table


_TABLE = _byte_table()


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 of a byte string, one table step per byte (check value of b"123456789": 0x0376E6E7)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ int(_TABLE[(crc >> 24) ^ b])
    return crc


@lru_cache(maxsize=8)
def _positional(n: int) -> tuple[np.ndarray, int]:
    """For messages of ``n`` bytes: each byte's contribution by position (CRC is linear) and the CRC of zeros."""
    tables = np.empty((n, 256), dtype=np.uint32)
    t = _TABLE.copy()
    for p in range(n - 1, -1, -1):  # a byte at p is followed by n-1-p more bytes: advance through them
        tables[p] = t
        t = (t << np.uint32(8)) ^ _TABLE[t >> np.uint32(24)]
    return tables, crc32_mpeg2(bytes(n))


def unitree_crc(image: bytes | np.ndarray) -> int:
    """Unitree's CRC of a struct's C memory image: crc32_core over all 32-bit words but the last.

    Equal to :func:`crc32_core` of the little-endian words (tested); computed with per-position tables in
    numpy (~20 us for a LowState) so a 500 Hz loop can check every message.
    """
    data = bytes(image) if not isinstance(image, np.ndarray) else image.tobytes()
    if len(data) < 8 or len(data) % 4:
        raise ValueError(f"unitree_crc: needs at least two whole 32-bit words, got {len(data)} bytes")
    raw = np.frombuffer(data, dtype="<u4")
    stream = np.frombuffer(raw[:-1].astype(">u4").tobytes(), dtype=np.uint8)
    tables, zeros = _positional(stream.size)
    return int(zeros ^ np.bitwise_xor.reduce(tables[np.arange(stream.size), stream]))


# --- messages <-> arrays -------------------------------------------------------------------------------------
class MotorCommands(NamedTuple):
    """Per-motor command arrays, length :data:`NUM_MOTORS` (float64 for math; sent as float32)."""

    mode: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray

    @classmethod
    def zeros(cls) -> "MotorCommands":
        """Every motor disabled, all values zero."""
        return cls(np.zeros(NUM_MOTORS, np.uint8), *(np.zeros(NUM_MOTORS) for _ in range(5)))


def lowcmd_image(mode_pr: int, mode_machine: int, cmd: MotorCommands) -> np.ndarray:
    """The C memory image of a LowCmd with its CRC filled in (a 0-d structured array)."""
    image = np.zeros((), dtype=LOWCMD_C)
    image["mode_pr"], image["mode_machine"] = mode_pr, mode_machine
    motors = image["motor_cmd"]
    for name in MotorCommands._fields:
        motors[name] = getattr(cmd, name)
    image["crc"] = unitree_crc(image)
    return image


def lowcmd_from_image(image: np.ndarray) -> Any:
    """The IDL message of a LowCmd memory image (fields converted exactly, float32 kept)."""
    m = image["motor_cmd"]
    cols = [m[f].tolist() for f in ("mode", "q", "dq", "tau", "kp", "kd", "reserve")]
    return _LowCmd(mode_pr=int(image["mode_pr"]), mode_machine=int(image["mode_machine"]),
                   motor_cmd=[MotorCmd_(*row) for row in zip(*cols)],
                   reserve=image["reserve"].tolist(), crc=int(image["crc"]))


def lowcmd_to_image(msg: Any) -> np.ndarray:
    """A received LowCmd back to its memory image (the CRC field as received, so it can be checked)."""
    image = np.zeros((), dtype=LOWCMD_C)
    image["mode_pr"], image["mode_machine"] = msg.mode_pr, msg.mode_machine
    rows = [(m.mode, m.q, m.dq, m.tau, m.kp, m.kd, m.reserve) for m in msg.motor_cmd]
    image["motor_cmd"] = np.array(rows, dtype=MOTOR_CMD_C)
    image["reserve"], image["crc"] = msg.reserve, msg.crc
    return image


def image_commands(image: np.ndarray) -> MotorCommands:
    """Per-motor arrays of a LowCmd memory image."""
    m = image["motor_cmd"]
    return MotorCommands(m["mode"].copy(), *(m[f].astype(np.float64) for f in ("q", "dq", "tau", "kp", "kd")))


def crc_ok(image: np.ndarray) -> bool:
    """Whether the image's crc field is Unitree's CRC of the rest."""
    return int(image["crc"]) == unitree_crc(image)


def lowstate_from_image(image: np.ndarray) -> Any:
    """The IDL message of a LowState memory image."""
    imu = image["imu_state"]
    m = image["motor_state"]
    motors = [_MotorState(int(m["mode"][i]), *(float(m[f][i]) for f in ("q", "dq", "ddq", "tau_est")),
                          m["temperature"][i].tolist(), float(m["vol"][i]), m["sensor"][i].tolist(),
                          int(m["motorstate"][i]), m["reserve"][i].tolist()) for i in range(NUM_MOTORS)]
    return _LowState(version=image["version"].tolist(), mode_pr=int(image["mode_pr"]),
                     mode_machine=int(image["mode_machine"]), tick=int(image["tick"]),
                     imu_state=IMUState_(imu["quaternion"].tolist(), imu["gyroscope"].tolist(),
                                         imu["accelerometer"].tolist(), imu["rpy"].tolist(), int(imu["temperature"])),
                     motor_state=motors, wireless_remote=image["wireless_remote"].tolist(),
                     reserve=image["reserve"].tolist(), crc=int(image["crc"]))


def lowstate_to_image(msg: Any) -> np.ndarray:
    """A received LowState back to its memory image (crc as received)."""
    image = np.zeros((), dtype=LOWSTATE_C)
    image["version"], image["mode_pr"], image["mode_machine"] = msg.version, msg.mode_pr, msg.mode_machine
    image["tick"] = msg.tick
    imu, i = image["imu_state"], msg.imu_state
    imu["quaternion"], imu["gyroscope"], imu["accelerometer"] = i.quaternion, i.gyroscope, i.accelerometer
    imu["rpy"], imu["temperature"] = i.rpy, i.temperature
    rows = [(m.mode, m.q, m.dq, m.ddq, m.tau_est, tuple(m.temperature), m.vol, tuple(m.sensor), m.motorstate,
             tuple(m.reserve)) for m in msg.motor_state]
    image["motor_state"] = np.array(rows, dtype=MOTOR_STATE_C)
    remote = msg.wireless_remote  # uint8 arrays deserialize as bytes
    image["wireless_remote"] = np.frombuffer(remote, np.uint8) if isinstance(remote, bytes) else remote
    image["reserve"], image["crc"] = msg.reserve, msg.crc
    return image


# --- the wire (CDR) image of the same messages -------------------------------------------------------------
CDR_LE_HEADER = b"\x00\x01\x00\x00"
"""Encapsulation header of a little-endian plain (XCDR1) sample, what these @final types serialize to."""


def _leaves(dtype: np.dtype, base: int = 0) -> list[tuple[int, int]]:
    """(offset, size) of every primitive in a C-layout dtype, in declaration order, arrays expanded."""
    out: list[tuple[int, int]] = []
    for name in dtype.names or ():
        field, offset = dtype.fields[name][:2]  # type: ignore[index]
        elem, shape = (field.subdtype if field.subdtype else (field, ()))
        for i in range(int(np.prod(shape, dtype=int))):
            start = base + offset + i * elem.itemsize
            out += _leaves(elem, start) if elem.names else [(start, elem.itemsize)]
    return out


class CdrCodec:
    """Memory image <-> CDR sample by a byte permutation: the same primitives in the same order, re-aligned.

    CDR aligns each primitive to its size from the start of the payload but never pads a struct to its
    alignment, so the wire bytes are a fixed gather of the memory image's bytes. One numpy gather replaces
    cyclonedds' per-field Python (de)serializer (~0.3-0.5 ms per message, ~5 us here), which matters at 500 Hz
    on a small computer; :meth:`self_check` proves the two agree before a link uses it.
    """

    def __init__(self, c_dtype: np.dtype) -> None:
        self.c_dtype = c_dtype
        pos, src, dst = 0, list[int](), list[int]()
        for offset, size in _leaves(c_dtype):
            pos = (pos + size - 1) // size * size
            src += range(offset, offset + size)
            dst += range(pos, pos + size)
            pos += size
        size = (pos + 3) // 4 * 4
        self._src, self._dst = np.array(src), np.array(dst)
        self._gather = np.full(size, c_dtype.itemsize)  # padding reads the appended zero byte
        self._gather[self._dst] = self._src

    def encode(self, image: np.ndarray) -> bytes:
        """A memory image -> the serialized sample (header + payload)."""
        raw = np.frombuffer(image.tobytes() + b"\0", dtype=np.uint8)
        return CDR_LE_HEADER + raw[self._gather].tobytes()

    def decode(self, data: bytes) -> np.ndarray | None:
        """A serialized sample -> its memory image; None for another encoding or size (use the slow path)."""
        if data[:4] != CDR_LE_HEADER or len(data) < 4 + self._gather.size:
            return None
        out = np.zeros(self.c_dtype.itemsize, dtype=np.uint8)
        out[self._src] = np.frombuffer(data, dtype=np.uint8, offset=4)[self._dst]
        return out.view(self.c_dtype).reshape(())

    def self_check(self, msg: idl.IdlStruct, image: np.ndarray) -> bool:
        """Whether this codec and cyclonedds' serializer agree on ``msg`` (whose memory image is ``image``)."""
        wire = msg.serialize()
        decoded = self.decode(wire)
        return self.encode(image) == wire.ljust(len(wire) + 3 & ~3, b"\0") and decoded is not None and \
            decoded.tobytes() == image.tobytes()


LOWCMD_CDR = CdrCodec(LOWCMD_C)
LOWSTATE_CDR = CdrCodec(LOWSTATE_C)


IFF_MULTICAST = 0x1000
"""Linux ``<net/if.h>`` flag: the interface can send and receive multicast (``lo`` cannot)."""
SIOCGIFADDR = 0x8915
"""Linux ioctl: an interface's IPv4 address."""


def interface_multicast(interface: str) -> bool:
    """Whether ``interface`` has IFF_MULTICAST (``/sys/class/net/<if>/flags``); False if it cannot be read."""
    try:
        with open(f"/sys/class/net/{interface}/flags", encoding="ascii") as f:
            return bool(int(f.read().strip(), 16) & IFF_MULTICAST)
    except (OSError, ValueError):
        return False


def interface_ipv4(interface: str) -> str | None:
    """The IPv4 address of ``interface`` (``127.0.0.1`` for ``lo``), or None if it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            req = struct.pack("256s", interface.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, req)[20:24])
        except OSError:
            return "127.0.0.1" if interface == "lo" else None


def cyclonedds_config(interface: str | None) -> str:
    """Cyclone DDS XML binding the participant to one network interface, discovering as Cyclone 0.10.x does.

    Unitree's robots and unitree_sdk2 use Cyclone DDS 0.10.x; this process uses a newer Cyclone, whose discovery
    differs on an interface without multicast. There 0.10.x disables multicast ("selected interface is not
    multicast-capable: disabling multicast") and sends discovery by unicast to the participant-index ports of
    the interface's own address, whereas newer Cyclone still multicasts on ``lo`` (Linux delivers it), so by
    default neither hears the other. On such an interface (``lo``) this config therefore does what 0.10.x does:
    ``AllowMulticast`` false, ``ParticipantIndex`` auto (a well-known unicast discovery port) and the
    interface's address as the only peer. On a multicast-capable NIC (the robot's 192.168.123.0/24 Ethernet, a
    veth) both versions discover by SPDP multicast, so Cyclone's defaults are kept. None lets Cyclone pick the
    interface (autodetermine). The other half of interoperability, type information 0.10.x can parse, is the
    IDL above (``octet`` members, see :data:`LowCmd_`).
    """
    if not interface:
        nic = '<NetworkInterface autodetermine="true" priority="default" multicast="default"/>'
        return (f'<?xml version="1.0" encoding="UTF-8"?><CycloneDDS><Domain Id="any"><General><Interfaces>{nic}'
                "</Interfaces></General></Domain></CycloneDDS>")
    nic = f'<NetworkInterface name="{interface}" priority="default" multicast="default"/>'
    general, discovery = "", ""
    address = None if interface_multicast(interface) else interface_ipv4(interface)
    if address is not None:
        general = "<AllowMulticast>false</AllowMulticast>"
        discovery = (f'<Discovery><ParticipantIndex>auto</ParticipantIndex><Peers><Peer address="{address}"/>'
                     "</Peers></Discovery>")
    return (f'<?xml version="1.0" encoding="UTF-8"?><CycloneDDS><Domain Id="any"><General><Interfaces>{nic}'
            f"</Interfaces>{general}</General>{discovery}</Domain></CycloneDDS>")
