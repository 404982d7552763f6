"""PX4 offboard control over MAVLink 2: the link to the flight controller and the offboard handshake.

Built on pymavlink rather than MAVSDK: no extra ``mavsdk_server`` binary to ship and supervise, and direct
control of every field and of the stream rate (MAVSDK's offboard plugin resends on its own timer and picks
the type masks itself). :class:`Px4Link` owns the bytes (UDP as PX4 SITL's offboard port 14540, or a serial port on
a companion computer), keeps the vehicle state from its telemetry, sends our HEARTBEAT, message-interval
requests, commands and setpoints. :class:`OffboardSession` is the handshake PX4 requires
(docs.px4.io, "Offboard Mode"): stream setpoints (> 2 Hz) for ``prestream_s``, then MAV_CMD_DO_SET_MODE to
OFFBOARD, then MAV_CMD_COMPONENT_ARM_DISARM, each checked against its COMMAND_ACK and retried.

Fail-safe: the session streams only while the caller's commands are fresh. When they stop, streaming stops
and the vehicle's own offboard-loss failsafe takes over (``COM_OF_LOSS_T``, then Hold, then the configured
action, e.g. Land). The e-stop is a forced disarm (ARM_DISARM param2 = 21196): the motors stop at once, in
the air too, like the RC kill switch; MAV_CMD_DO_FLIGHTTERMINATION is not used because PX4 ignores it unless
the ``CBRK_FLIGHTTERM`` circuit breaker is opened. Pure core: no rclpy.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import termios
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.hardware.px4_codec import (
    AUTOPILOT_COMPONENT,
    FORCE_MAGIC,
    MAIN_OFFBOARD,
    OFFBOARD,
    Setpoint,
    command_name,
    encode_setpoint,
    mode_name,
    parse_datagram,
    result_name,
)

TELEMETRY = {"ATTITUDE_QUATERNION": mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION,
             "LOCAL_POSITION_NED": mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED,
             "HIGHRES_IMU": mavlink.MAVLINK_MSG_ID_HIGHRES_IMU,
             "EXTENDED_SYS_STATE": mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE,
             "HEARTBEAT": mavlink.MAVLINK_MSG_ID_HEARTBEAT}
"""Streams the bridge asks for with MAV_CMD_SET_MESSAGE_INTERVAL."""
LANDED_STATES = {0: "UNDEFINED", 1: "ON_GROUND", 2: "IN_AIR", 3: "TAKEOFF", 4: "LANDING"}
_BAUDS = {9600: termios.B9600, 57600: termios.B57600, 115200: termios.B115200, 230400: termios.B230400,
          460800: termios.B460800, 921600: termios.B921600}


class UdpTransport:
    """``udpin:HOST:PORT`` (listen, answer whoever spoke last, as PX4's offboard API port) or ``udpout:HOST:PORT``."""

    def __init__(self, mode: str, host: str, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.remote: tuple[str, int] | None = None
        if mode == "udpin":
            self.sock.bind((host, port))
        else:
            self.remote = (host, port)
        self.sock.setblocking(False)
        self.learn = mode == "udpin"

    def fileno(self) -> int:
        """The socket, for select()."""
        return self.sock.fileno()

    datagrams = True
    """Each chunk read is one datagram of whole frames (parsed on its own)."""

    def read(self) -> list[bytes]:
        """Every datagram waiting now ([] when none)."""
        chunks: list[bytes] = []
        while True:
            try:
                data, addr = self.sock.recvfrom(65535)
            except (BlockingIOError, ConnectionRefusedError):
                return chunks
            chunks.append(data)
            if self.learn:
                self.remote = addr

    def write(self, data: bytes) -> None:
        """One datagram to the remote (dropped before anyone has spoken to a udpin port)."""
        if self.remote is not None:
            with contextlib.suppress(OSError):  # nobody listening (yet): UDP just drops it, like the radio
                self.sock.sendto(data, self.remote)

    def close(self) -> None:
        """Release the port."""
        self.sock.close()


class SerialTransport:
    """``serial:/dev/ttyACM0:921600``: a raw 8N1 tty (termios, no pyserial), e.g. PX4's TELEM2 port."""

    def __init__(self, device: str, baud: int) -> None:
        if baud not in _BAUDS:
            raise ValueError(f"serial baud {baud} not supported (one of {sorted(_BAUDS)})")
        self.fd = os.open(device, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        attrs = termios.tcgetattr(self.fd)
        attrs[0] = 0  # iflag: raw
        attrs[1] = 0  # oflag
        attrs[2] = termios.CS8 | termios.CREAD | termios.CLOCAL
        attrs[3] = 0  # lflag: no echo, no canonical mode
        attrs[4] = attrs[5] = _BAUDS[baud]
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)

    def fileno(self) -> int:
        """The tty, for select()."""
        return self.fd

    datagrams = False
    """A byte stream: frames may straddle reads (the parser keeps the partial one)."""

    def read(self) -> list[bytes]:
        """Every byte waiting now, as one chunk ([] when none)."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        return [data] if data else []

    def write(self, data: bytes) -> None:
        """Bytes to the flight controller (dropped when the tty buffer is full)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self.fd, data)

    def close(self) -> None:
        """Release the tty."""
        os.close(self.fd)


def open_transport(connection: str) -> UdpTransport | SerialTransport:
    """A transport from ``udpin:HOST:PORT``, ``udpout:HOST:PORT`` or ``serial:DEVICE:BAUD``."""
    kind, _, rest = connection.partition(":")
    where, _, number = rest.rpartition(":")
    if kind not in ("udpin", "udpout", "serial") or not where or not number.isdigit():
        raise ValueError(f"connection must be udpin:HOST:PORT, udpout:HOST:PORT or serial:DEVICE:BAUD, "
                         f"got {connection!r}")
    return SerialTransport(where, int(number)) if kind == "serial" else UdpTransport(kind, where, int(number))


@dataclass
class VehicleState:
    """What the vehicle last told us, in its own frames (NED / FRD); times are the link's clock."""

    heartbeat_time: float = -np.inf
    system_id: int = 0
    armed: bool = False
    custom_mode: int = 0
    system_status: int = 0
    landed_state: int = 0
    position_ned: np.ndarray = field(default_factory=lambda: np.zeros(3))
    velocity_ned: np.ndarray = field(default_factory=lambda: np.zeros(3))
    quat_ned_frd: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.0, 0.0, 0.0]))
    rates_frd: np.ndarray = field(default_factory=lambda: np.zeros(3))
    accel_frd: np.ndarray = field(default_factory=lambda: np.zeros(3))
    position_time: float = -np.inf
    attitude_time: float = -np.inf
    params: dict[str, float] = field(default_factory=dict)
    statustext: deque[str] = field(default_factory=lambda: deque(maxlen=50))

    @property
    def mode(self) -> str:
        """PX4 mode name (OFFBOARD, AUTO_LOITER, ...)."""
        return mode_name(self.custom_mode)


class Px4Link:
    """One MAVLink 2 connection to a PX4 vehicle: send commands/setpoints, fold telemetry into :attr:`state`."""

    def __init__(self, connection: str, system_id: int = 245, component_id: int = mavlink.MAV_COMP_ID_ONBOARD_COMPUTER,
                 vehicle_system_id: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.transport = open_transport(connection)
        self.mav = mavlink.MAVLink(self, srcSystem=system_id, srcComponent=component_id)
        self.mav.robust_parsing = True
        self.vehicle_system_id = vehicle_system_id
        """The vehicle's MAVLink system id; 0 = the first autopilot heard."""
        self.clock = clock
        self.state = VehicleState()
        self.acks: dict[int, tuple[int, float]] = {}
        """Command id -> (MAV_RESULT, time) of its latest COMMAND_ACK."""
        self.listeners: list[Callable[[mavlink.MAVLink_message, float], None]] = []
        """Called with every message from the vehicle and its arrival time (e.g. to publish at once)."""
        self._t0 = clock()

    def write(self, data: bytes) -> None:
        """Pymavlink's ``file``: packed messages go out through the transport."""
        self.transport.write(data)

    def fileno(self) -> int:
        """The transport, for select()."""
        return self.transport.fileno()

    def time_boot_ms(self) -> int:
        """Our milliseconds since start (the time field of our setpoints)."""
        return int((self.clock() - self._t0) * 1000)

    # --- receive -------------------------------------------------------------------------------------------
    def poll(self, timeout: float = 0.0) -> int:
        """Read and fold in every waiting message (waiting up to ``timeout`` [s] for the first); returns how many."""
        if timeout > 0:
            select.select([self.transport], [], [], timeout)
        chunks = self.transport.read()
        if not chunks:
            return 0
        now = self.clock()
        count = 0
        messages = [m for chunk in chunks for m in (parse_datagram(self.mav, chunk) if self.transport.datagrams
                                                    else (self.mav.parse_buffer(chunk) or []))
                    if m.get_type() != "BAD_DATA"]
        for msg in messages:
            src = msg.get_srcSystem()
            if self.vehicle_system_id and src != self.vehicle_system_id:
                continue
            self._fold(msg, now)
            for listener in self.listeners:
                listener(msg, now)
            count += 1
        return count

    def _fold(self, msg: mavlink.MAVLink_message, now: float) -> None:
        st, kind = self.state, msg.get_type()
        if kind == "HEARTBEAT":
            if msg.autopilot == mavlink.MAV_AUTOPILOT_INVALID or msg.get_srcComponent() != AUTOPILOT_COMPONENT:
                return  # a GCS or another companion, not the flight controller
            if not self.vehicle_system_id:
                self.vehicle_system_id = msg.get_srcSystem()
            st.heartbeat_time, st.system_id = now, msg.get_srcSystem()
            st.armed = bool(msg.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
            st.custom_mode, st.system_status = int(msg.custom_mode), int(msg.system_status)
        elif kind == "LOCAL_POSITION_NED":
            st.position_ned = np.array([msg.x, msg.y, msg.z])
            st.velocity_ned = np.array([msg.vx, msg.vy, msg.vz])
            st.position_time = now
        elif kind == "ATTITUDE_QUATERNION":
            st.quat_ned_frd = np.array([msg.q1, msg.q2, msg.q3, msg.q4])
            st.rates_frd = np.array([msg.rollspeed, msg.pitchspeed, msg.yawspeed])
            st.attitude_time = now
        elif kind == "HIGHRES_IMU":
            st.accel_frd = np.array([msg.xacc, msg.yacc, msg.zacc])
        elif kind == "EXTENDED_SYS_STATE":
            st.landed_state = int(msg.landed_state)
        elif kind == "COMMAND_ACK":
            self.acks[int(msg.command)] = (int(msg.result), now)
        elif kind == "STATUSTEXT":
            st.statustext.append(msg.text)
        elif kind == "PARAM_VALUE":
            st.params[msg.param_id] = float(msg.param_value)

    def link_up(self, timeout: float, now: float | None = None) -> bool:
        """Whether a HEARTBEAT of the vehicle arrived within the last ``timeout`` seconds."""
        return (self.clock() if now is None else now) - self.state.heartbeat_time <= timeout

    # --- send ----------------------------------------------------------------------------------------------
    def send_heartbeat(self) -> None:
        """Our HEARTBEAT as an onboard controller (PX4 watches it for its data-link-loss check)."""
        self.mav.heartbeat_send(mavlink.MAV_TYPE_ONBOARD_CONTROLLER, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                                mavlink.MAV_STATE_ACTIVE)

    def command(self, command: int, *params: float) -> None:
        """COMMAND_LONG to the autopilot (up to 7 params, the rest 0); the answer lands in :attr:`acks`."""
        p = [float(x) for x in params] + [0.0] * (7 - len(params))
        self.acks.pop(command, None)
        self.mav.command_long_send(self.vehicle_system_id, AUTOPILOT_COMPONENT, command, 0, *p)

    def request_interval(self, message_id: int, hz: float) -> None:
        """MAV_CMD_SET_MESSAGE_INTERVAL: stream ``message_id`` at ``hz`` (0 = the vehicle's default)."""
        self.command(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, message_id, 1e6 / hz if hz > 0 else 0)

    def request_param(self, name: str) -> None:
        """PARAM_REQUEST_READ by name; the value lands in ``state.params``."""
        self.mav.param_request_read_send(self.vehicle_system_id, AUTOPILOT_COMPONENT, name.encode(), -1)

    def arm(self) -> None:
        """MAV_CMD_COMPONENT_ARM_DISARM(1): PX4 runs its arming checks."""
        self.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)

    def disarm(self, force: bool = False) -> None:
        """MAV_CMD_COMPONENT_ARM_DISARM(0); ``force`` (param2 = 21196) stops the motors even in flight."""
        self.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 0, FORCE_MAGIC if force else 0)

    def set_offboard(self) -> None:
        """MAV_CMD_DO_SET_MODE with PX4 custom main mode OFFBOARD."""
        self.command(mavlink.MAV_CMD_DO_SET_MODE, mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, MAIN_OFFBOARD)

    def send_setpoint(self, setpoint: Setpoint) -> None:
        """One offboard setpoint message."""
        self.mav.send(encode_setpoint(self.mav, setpoint, self.time_boot_ms(), self.vehicle_system_id))

    def wait_ack(self, command: int, timeout: float) -> int | None:
        """Block (polling the link) until ``command`` is acknowledged; its MAV_RESULT or None on timeout."""
        deadline = self.clock() + timeout
        while command not in self.acks and self.clock() < deadline:
            self.poll(min(0.01, max(deadline - self.clock(), 0.0)))
        return self.acks[command][0] if command in self.acks else None

    def close(self) -> None:
        """Close the port; the vehicle sees our stream and heartbeat stop."""
        self.transport.close()


@dataclass(frozen=True)
class SessionConfig:
    """Timing of :class:`OffboardSession`."""

    setpoint_hz: float = 50.0
    """Rate the latest setpoint is re-sent at (PX4 needs > 2 Hz)."""
    prestream_s: float = 1.0
    """Stream this long before asking for OFFBOARD (PX4 refuses the switch without a stream)."""
    command_timeout_s: float = 0.2
    """A command older than this [s] is stale: streaming stops and PX4's offboard-loss failsafe follows."""
    link_timeout_s: float = 1.0
    """No vehicle HEARTBEAT for this long [s]: the link is lost."""
    heartbeat_hz: float = 2.0
    """Rate of our own HEARTBEAT (PX4 expects >= 1 Hz)."""
    telemetry_hz: float = 100.0
    """Rate requested for ATTITUDE_QUATERNION, LOCAL_POSITION_NED and HIGHRES_IMU."""
    status_hz: float = 20.0
    """Rate requested for HEARTBEAT and EXTENDED_SYS_STATE (how fast a mode change is seen)."""
    retry_s: float = 0.5
    """Re-send an unanswered or refused handshake command after this long [s]."""
    max_retries: int = 6
    """Handshake commands sent per stream before giving up until the stream restarts."""
    auto_arm: bool = False
    """Arm once in OFFBOARD (False: a pilot arms, e.g. from the RC or QGroundControl)."""

    def __post_init__(self) -> None:
        if not 2.0 < self.setpoint_hz <= 500:
            raise ValueError(f"setpoint_hz must be in (2, 500] (PX4 needs > 2 Hz), got {self.setpoint_hz}")
        for name in ("prestream_s", "command_timeout_s", "link_timeout_s", "heartbeat_hz", "telemetry_hz",
                     "status_hz", "retry_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.heartbeat_hz < 1:
            raise ValueError(f"heartbeat_hz must be >= 1 (PX4 watches our heartbeat), got {self.heartbeat_hz}")
        if self.max_retries < 1:
            raise ValueError(f"max_retries must be >= 1, got {self.max_retries}")


class OffboardSession:
    """Streams the caller's latest setpoint and walks PX4 through OFFBOARD and arming; drives the e-stop.

    A *stream* starts when a fresh command arrives while none was streaming (and the link is up, the e-stop
    clear) and ends when commands go stale, the link drops or the e-stop engages. Within a stream the
    handshake runs until the vehicle is in OFFBOARD (and armed, with ``auto_arm``). If the vehicle then leaves
    OFFBOARD (a pilot took over on the RC, or a PX4 failsafe) the session does not fight it: it asks again
    only when a new stream starts. ``log(level, text)`` receives every event ("info", "warn", "error").
    """

    def __init__(self, link: Px4Link, config: SessionConfig, log: Callable[[str, str], None]) -> None:
        self.link, self.config, self.log = link, config, log
        self.setpoint: Setpoint | None = None
        self.command_time = -np.inf
        self.estop = False
        self.streaming = False
        self.stream_start = 0.0
        self.handshake_done = False
        self.connected = False
        self.sent = 0
        """Setpoint messages sent."""
        self._next_send = 0.0
        self._next_heartbeat = 0.0
        self._pending: tuple[int, float] | None = None
        self._tries = 0
        self._next_estop = 0.0
        self._seen_acks: dict[int, float] = {}

    def command(self, setpoint: Setpoint, now: float) -> None:
        """A new checked setpoint from the policy; sent at once when streaming (no wait for the next tick)."""
        self.setpoint, self.command_time = setpoint, now
        if self.streaming:
            self._send(now)

    def set_estop(self, engaged: bool, now: float) -> None:
        """Latch (force-disarm now and until the vehicle reports disarmed) or clear the e-stop."""
        if engaged and not self.estop:
            self.log("error", "e-stop: force-disarming the vehicle (MAV_CMD_COMPONENT_ARM_DISARM, param2=21196)")
            self._stop_stream(now, "e-stop")
            self._next_estop = now
        elif not engaged and self.estop:
            self.log("info", "e-stop cleared: a new command stream may arm the vehicle again")
        self.estop = engaged
        self.tick(now)

    def _send(self, now: float) -> None:
        assert self.setpoint is not None
        self.link.send_setpoint(self.setpoint)
        self.sent += 1
        self._next_send = now + 1.0 / self.config.setpoint_hz

    def _stop_stream(self, now: float, why: str) -> None:
        if self.streaming:
            self.streaming = False
            self.log("warn", f"stopped streaming setpoints ({why}) after {self.sent} sent; "
                             "the vehicle's offboard-loss failsafe (COM_OF_LOSS_T) takes over")

    def _connected(self, now: float) -> None:
        cfg, link = self.config, self.link
        self.log("info", f"link up: PX4 system {link.state.system_id}, mode {link.state.mode}, "
                         f"{'armed' if link.state.armed else 'disarmed'}; requesting telemetry streams")
        for name, msg_id in TELEMETRY.items():
            link.request_interval(msg_id, cfg.status_hz if name in ("HEARTBEAT", "EXTENDED_SYS_STATE")
                                  else cfg.telemetry_hz)
        link.request_param("MPC_THR_HOVER")
        link.request_param("COM_OF_LOSS_T")

    def tick(self, now: float) -> None:
        """Heartbeat, link watch, streaming, handshake and e-stop; call at least at ``setpoint_hz``."""
        cfg, link, st = self.config, self.link, self.link.state
        if now >= self._next_heartbeat:
            link.send_heartbeat()
            self._next_heartbeat = now + 1.0 / cfg.heartbeat_hz
        up = link.link_up(cfg.link_timeout_s, now)
        if up and not self.connected:
            self.connected = True
            self._connected(now)
        elif not up and self.connected:
            self.connected = False
            self.log("error", f"link lost: no HEARTBEAT for {cfg.link_timeout_s:g} s")
            self._stop_stream(now, "link lost")
        self._check_acks()
        fresh = self.setpoint is not None and now - self.command_time <= cfg.command_timeout_s
        if self.streaming and not fresh:
            self._stop_stream(now, f"no command for {cfg.command_timeout_s:g} s")
        elif not self.streaming and fresh and up and not self.estop:
            self.streaming, self.stream_start = True, now
            self.handshake_done, self._pending, self._tries = False, None, 0
            self.log("info", "command stream started: streaming setpoints before requesting OFFBOARD")
        if self.streaming and now >= self._next_send:
            self._send(now)
        if self.streaming and not self.handshake_done and now - self.stream_start >= cfg.prestream_s:
            self._handshake(now)
        if self.estop and up and st.armed and now >= self._next_estop:
            link.disarm(force=True)
            self._next_estop = now + 0.2

    def _handshake(self, now: float) -> None:
        cfg, link, st = self.config, self.link, self.link.state
        in_offboard = st.custom_mode == OFFBOARD
        if in_offboard and (st.armed or not cfg.auto_arm):
            self.handshake_done = True
            self.log("info", f"offboard control active ({'armed' if st.armed else 'waiting for a pilot to arm'})")
            return
        step = mavlink.MAV_CMD_DO_SET_MODE if not in_offboard else mavlink.MAV_CMD_COMPONENT_ARM_DISARM
        if self._pending is not None and self._pending[0] == step and now - self._pending[1] < cfg.retry_s:
            return  # wait for the answer to the last request
        if self._tries >= cfg.max_retries:
            self.handshake_done = True
            self.log("error", f"handshake failed: {command_name(step)} unanswered or refused {self._tries} times; "
                              "retrying when the command stream restarts")
            return
        self._tries += 1
        self._pending = (step, now)
        if step == mavlink.MAV_CMD_DO_SET_MODE:
            self.log("info", f"requesting OFFBOARD (vehicle in {st.mode})")
            link.set_offboard()
        else:
            self.log("info", "requesting arming")
            link.arm()

    def _check_acks(self) -> None:
        for cmd, (result, t) in self.link.acks.items():
            if self._seen_acks.get(cmd) == t:
                continue
            self._seen_acks[cmd] = t
            if cmd == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL and result == mavlink.MAV_RESULT_ACCEPTED:
                continue
            level = "info" if result == mavlink.MAV_RESULT_ACCEPTED else "warn"
            self.log(level, f"COMMAND_ACK {command_name(cmd)}: {result_name(result)}")
