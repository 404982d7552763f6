"""A Crazyflie over Bitcraze's cflib: state in through one log block, setpoints out, the fail-safe in between.

One worker thread owns the link (``radio://0/80/2M/E7E7E7E7E7`` on hardware, ``udp://127.0.0.1:19850`` for
the emulator, as Bitcraze's SITL is reached): it connects (TOC download, parameter read-back), puts the
classic commander in rate mode (``flightmode.stabModeRoll/Pitch = 0``), unlocks its thrust with one zero
setpoint (crtp_commander_rpyt.c keeps thrust locked until it sees one), starts the state log block
(:data:`~robot_rl.hardware.crazyflie_protocol.STATE_LOG_VARIABLES`) and then streams the
:class:`~robot_rl.hardware.crazyflie_failsafe.CrazyflieFailsafe`'s setpoint at ``command_hz``. A new command
is sent at once (no wait for the next tick). No state for ``link_timeout_s`` (or cflib reporting the link
lost) marks the link lost; a new connection is tried every ``reconnect_period_s``.

Setpoints map to cflib calls: position -> ``commander.send_position_setpoint`` (generic commander, yaw in
degrees), rates -> ``commander.send_setpoint(roll_rate, pitch_rate, -yaw_rate, pwm)``
(:func:`~robot_rl.hardware.crazyflie_protocol.rates_to_rpyt`), stop -> ``commander.send_stop_setpoint``;
the e-stop also sends ``supervisor.send_emergency_stop`` (the firmware locks until rebooted).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cflib.crtp
from cflib.crazyflie import Crazyflie
from cflib.crazyflie.log import LogConfig

from robot_rl.core.config import ConfigError
from robot_rl.hardware.crazyflie_failsafe import Command, CrazyflieFailsafe, FlightMode, Setpoint
from robot_rl.hardware.crazyflie_protocol import (
    FORSTER_QUADRATIC,
    STATE_LOG_VARIABLES,
    StateSample,
    ThrustMap,
    decode_state,
    rates_to_rpyt,
)

log = logging.getLogger(__name__)
RATE_MODE_PARAMS = ("flightmode.stabModeRoll", "flightmode.stabModePitch")
"""Set to 0 (rate) so port-3 setpoints carry roll and pitch rates instead of angles."""

_drivers_lock = threading.Lock()
_drivers_ready = False


def init_drivers() -> None:
    """Initialise cflib's link drivers once per process (cflib appends them again on every call)."""
    global _drivers_ready
    with _drivers_lock:
        if not _drivers_ready:
            cflib.crtp.init_drivers()
            _drivers_ready = True


@dataclass(frozen=True)
class CrazyflieLinkConfig:
    """How to reach the vehicle and how fast to talk to it."""

    uri: str = "radio://0/80/2M/E7E7E7E7E7"
    """cflib URI: radio://<dongle>/<channel>/<rate>/<address> on hardware, udp://<host>:<port> for SITL."""
    state_period_ms: int = 10
    """Log period of the state block [ms]; the firmware counts in 10 ms, so 10 (100 Hz) is the fastest."""
    command_hz: float = 100.0
    """Setpoint stream rate when no command arrives in between [Hz] (the firmware wants >= 2 Hz)."""
    link_timeout_s: float = 0.5
    """No state sample for this long [s] -> link lost."""
    reconnect_period_s: float = 1.0
    """Pause between connection attempts [s]."""
    connect_timeout_s: float = 10.0
    """Longest wait for TOCs, parameters and the first sample of one attempt [s]."""
    toc_cache_dir: str = ""
    """Folder for cflib's TOC cache (faster reconnects over the radio); "" keeps none."""
    thrust_quadratic: float = FORSTER_QUADRATIC
    """Quadratic share of the PWM -> thrust curve (:class:`~robot_rl.hardware.crazyflie_protocol.ThrustMap`)."""

    def __post_init__(self) -> None:
        if not self.uri.startswith(("radio://", "udp://", "usb://", "tcp://")):
            raise ConfigError(f"CrazyflieLinkConfig.uri: expected radio://, udp://, usb:// or tcp://, got {self.uri!r}")
        if not (10 <= self.state_period_ms <= 2540 and self.state_period_ms % 10 == 0):
            raise ConfigError(f"CrazyflieLinkConfig.state_period_ms: a multiple of 10 in [10, 2540], "
                              f"got {self.state_period_ms}")
        for name in ("command_hz", "link_timeout_s", "reconnect_period_s", "connect_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"CrazyflieLinkConfig.{name}: must be > 0")
        if not 0.0 <= self.thrust_quadratic <= 1.0:
            raise ConfigError("CrazyflieLinkConfig.thrust_quadratic: must be in [0, 1]")


class CrazyflieLink:
    """Keeps one Crazyflie connected and fed with the fail-safe's setpoints (a worker thread)."""

    def __init__(self, config: CrazyflieLinkConfig, failsafe: CrazyflieFailsafe,
                 on_state: Callable[[StateSample], None] | None = None,
                 on_mode: Callable[[FlightMode, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.failsafe = failsafe
        self.thrust = ThrustMap(quadratic=config.thrust_quadratic)
        self.on_state = on_state
        self.on_mode = on_mode
        self.clock = clock
        self.reconnects = 0
        """Successful connections after the first."""
        self.connects = 0
        self.last_error = ""
        """Why the last connection attempt failed or the link was lost."""
        self._cf: Any = None
        self._state: StateSample | None = None
        self._arrivals: deque[float] = deque(maxlen=200)
        self._last_send = -math.inf
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._mode_seen: tuple[FlightMode, str] | None = None
        self._thread = threading.Thread(target=self._run, name="crazyflie-link", daemon=True)

    # --- public -----------------------------------------------------------------------------------------------
    def start(self) -> CrazyflieLink:
        """Start connecting and streaming."""
        init_drivers()
        self._thread.start()
        return self

    @property
    def state(self) -> StateSample | None:
        """The newest state sample (None before the first)."""
        return self._state

    @property
    def crazyflie(self) -> Any:
        """The live cflib ``Crazyflie`` (None while disconnected), e.g. for a link echo."""
        return self._cf

    @property
    def connected(self) -> bool:
        """Whether state is flowing."""
        return self.failsafe.link_up

    def state_rate(self) -> float:
        """Samples per second over the last ~2 s (0 when none)."""
        now = self.clock()
        recent = [t for t in self._arrivals if now - t <= 2.0]
        return len(recent) / 2.0 if recent else 0.0

    def submit(self, command: Command) -> None:
        """Hand a command to the fail-safe and send it now; :class:`TargetRejected` with the reason if refused."""
        with self._lock:
            now = self.clock()
            self.failsafe.command(command, now)
            self._tick(now)

    def estop(self, engaged: bool, reason: str = "e-stop") -> None:
        """Latch (motors off, firmware emergency stop) or clear the e-stop."""
        with self._lock:
            now = self.clock()
            self.failsafe.estop(engaged, now, reason)
            cf = self._cf
            if engaged and cf is not None and self.failsafe.link_up:
                try:
                    cf.supervisor.send_emergency_stop()
                except Exception as exc:
                    log.warning("emergency stop packet not sent: %s", exc)
            self._tick(now)

    def close(self) -> None:
        """Stop the motors (stop setpoint, then hand the commander back) and close the link."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)
        cf, self._cf = self._cf, None
        if cf is not None:
            def finish() -> None:
                try:
                    cf.commander.send_stop_setpoint()
                    cf.commander.send_notify_setpoint_stop()
                    cf.close_link()
                except Exception as exc:
                    log.info("closing the link: %s", exc)
            closer = threading.Thread(target=finish, name="crazyflie-close", daemon=True)
            closer.start()
            closer.join(timeout=2.0)  # a wedged cflib must not keep the process alive

    # --- worker -----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        period = 1.0 / self.config.command_hz
        while not self._stop.is_set():
            if self._cf is None:
                if not self._connect():
                    self._stop.wait(self.config.reconnect_period_s)
                continue
            now = self.clock()
            state = self._state
            age = now - state.stamp if state is not None else math.inf
            if self._lost.is_set() or age > self.config.link_timeout_s:
                self._drop(self.last_error if self._lost.is_set() else f"no state for {age:.2f} s")
                continue
            with self._lock:
                if now - self._last_send >= 0.5 * period:
                    self._tick(now)
            self._stop.wait(period)

    def _tick(self, now: float) -> None:
        """Run the fail-safe and send its setpoint (caller holds the lock)."""
        setpoint = self.failsafe.update(self._state, now)
        seen = (self.failsafe.reported_mode, self.failsafe.reason)
        if seen != self._mode_seen:
            self._mode_seen = seen
            if self.on_mode is not None:
                self.on_mode(*seen)
        if self._cf is None or not self.failsafe.link_up:
            return
        try:
            self._send(setpoint)
            self._last_send = now
        except Exception as exc:
            self.last_error = f"send failed: {exc}"
            self._lost.set()

    def _send(self, sp: Setpoint) -> None:
        commander = self._cf.commander
        if sp.kind == "position":
            x, y, z = (float(v) for v in sp.position)
            commander.send_position_setpoint(x, y, z, math.degrees(sp.yaw))
        elif sp.kind == "rates":
            roll, pitch, yaw_rate = rates_to_rpyt(sp.rates)
            commander.send_setpoint(roll, pitch, yaw_rate, self.thrust.pwm(sp.thrust))
        elif sp.kind == "stop":
            commander.send_stop_setpoint()

    def _connect(self) -> bool:
        cfg = self.config
        cf = Crazyflie(rw_cache=cfg.toc_cache_dir or None)
        ready, failed = threading.Event(), []

        def on_failed(uri: str, message: str) -> None:
            failed.append(message.strip().splitlines()[0] if message.strip() else "connection failed")
            ready.set()

        def on_lost(uri: str, message: str) -> None:
            self.last_error = f"cflib: {message.strip().splitlines()[0] if message.strip() else 'link lost'}"
            self._lost.set()

        cf.fully_connected.add_callback(lambda uri: ready.set())
        cf.connection_failed.add_callback(on_failed)
        cf.connection_lost.add_callback(on_lost)
        self._lost.clear()
        self._state = None
        cf.open_link(cfg.uri)
        deadline = time.monotonic() + cfg.connect_timeout_s
        try:
            if not ready.wait(cfg.connect_timeout_s) or failed:
                raise ConnectionError(failed[0] if failed else f"no answer within {cfg.connect_timeout_s:g} s")
            # cflib's latency pinger (a non-daemon thread) deadlocks with a send that fails: the failing
            # send holds the send lock and the link-error path joins the pinger, which waits for that lock.
            cf.link_statistics.stop()
            for name in RATE_MODE_PARAMS:
                self._set_param(cf, name, 0, deadline)
            block = LogConfig(name="robot_rl_state", period_in_ms=cfg.state_period_ms)
            for name, ctype in STATE_LOG_VARIABLES:
                block.add_variable(name, ctype)
            cf.log.add_config(block)
            block.data_received_cb.add_callback(self._on_log)
            block.start()
            while self._state is None:
                if time.monotonic() > deadline or self._lost.is_set() or self._stop.is_set():
                    raise ConnectionError("no state log data arrived")
                time.sleep(0.005)
            cf.commander.send_setpoint(0.0, 0.0, 0.0, 0)  # unlock the classic commander's thrust
        except Exception as exc:  # cflib raises bare Exceptions; the worker must live on to retry
            self.last_error = f"connecting to {cfg.uri}: {exc}"
            log.warning(self.last_error)
            self._close_async(cf)
            with self._lock:
                self.failsafe.link(False, self.clock(), self.last_error)
                self._tick(self.clock())
            return False
        with self._lock:
            self._cf = cf
            self.connects += 1
            self.reconnects = self.connects - 1
            self.failsafe.link(True, self.clock(), f"connected to {cfg.uri}")
            self._tick(self.clock())
        log.info("connected to %s", cfg.uri)
        return True

    @staticmethod
    def _set_param(cf: Any, name: str, value: int, deadline: float) -> None:
        """Write a parameter and wait for the firmware's echo of the new value."""
        group, short = name.split(".")
        done = threading.Event()

        def updated(_name: str, text: str) -> None:
            if float(text) == value:
                done.set()

        cf.param.add_update_callback(group=group, name=short, cb=updated)
        try:
            cf.param.set_value(name, value)
            if not done.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"parameter {name} not confirmed")
        finally:
            cf.param.remove_update_callback(group=group, name=short, cb=updated)

    def _on_log(self, timestamp: int, data: dict[str, float], _block: object) -> None:
        now = self.clock()
        sample = decode_state(data, now, int(timestamp))
        self._state = sample
        self._arrivals.append(now)
        if self.on_state is not None:
            self.on_state(sample)

    def _drop(self, reason: str) -> None:
        """The link is gone: tell the fail-safe, close cflib's side in the background, reconnect later."""
        with self._lock:
            self.last_error = reason
            cf, self._cf = self._cf, None
            self.failsafe.link(False, self.clock(), f"link lost: {reason}")
            self._tick(self.clock())
        log.warning("link to %s lost: %s", self.config.uri, reason)
        self._close_async(cf)

    @staticmethod
    def _close_async(cf: Any) -> None:
        """Close in the background: cflib joins its receive thread (up to 1 s on UDP), never block the worker."""
        def close() -> None:
            try:
                cf.close_link()
            except Exception as exc:
                log.debug("close_link: %s", exc)
        threading.Thread(target=close, name="crazyflie-close", daemon=True).start()

