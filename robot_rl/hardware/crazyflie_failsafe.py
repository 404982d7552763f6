"""What the Crazyflie bridge sends each tick: the command stream when it is fresh, else hover, land, stop.

The firmware's own commander watchdog levels the vehicle 0.5 s after the last setpoint and cuts the motors
after 2 s (supervisor.c), which drops a flying Crazyflie. The bridge therefore never lets its setpoint
stream stop while the link is up: a stale command stream (policy crashed, topic silent) becomes a
position hold where the vehicle is, for ``hover_time``, then a descent at ``land_speed`` and a stop
setpoint once down; the e-stop stops the motors at once and latches. Commands are checked before they
count: NaN, thrust outside the rotors' range, body rates over ``max_rate``, positions outside the
workspace box are refused with the reason, and the vehicle keeps doing what it did. Pure logic, driven
by the caller's clock, so every transition is unit-tested without a link.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

from robot_rl.control.base import TargetRejected
from robot_rl.control.config import ControlConfig, workspace_box
from robot_rl.control.targets import as_vector
from robot_rl.control.watchdog import WorkspaceBox
from robot_rl.core.config import ConfigError
from robot_rl.hardware.crazyflie_protocol import StateSample
from robot_rl.robots import cf2x

_BOX = workspace_box(cf2x.NAME)


class FlightMode(str, enum.Enum):
    """What the bridge is doing with the vehicle."""

    FLYING = "flying"
    """Following fresh commands."""
    HOVER = "hover_failsafe"
    """Commands went stale: holding the position where that happened."""
    LANDING = "landing"
    """Hovered for ``hover_time``: descending at ``land_speed``."""
    MOTORS_OFF = "motors_off"
    """Landed, never flown, or e-stopped: stop setpoints."""
    LINK_LOST = "link_lost"
    """No state from the vehicle: nothing can be sent until the link is back."""


@dataclass(frozen=True)
class FailsafeConfig:
    """Timings and limits of :class:`CrazyflieFailsafe` (defaults: controllers/cf2x.yaml)."""

    watchdog_timeout: float = 0.5
    """A command older than this [s] is stale: hover in place."""
    hover_time: float = 2.0
    """Hover this long [s] before landing."""
    land_speed: float = 0.3
    """Descent speed of the landing [m/s]."""
    land_height: float = 0.02
    """Below this height [m] a landing ends with the motors off (also once the descending setpoint has been
    at the floor for 0.5 s and the vehicle no longer sinks, whatever its resting height)."""
    workspace_low: tuple[float, float, float] = _BOX.low
    """Lower corner of the box position commands and the vehicle must stay in [m] (default: the
    ``safety.workspace_low/high`` of controllers/cf2x.yaml)."""
    workspace_high: tuple[float, float, float] = _BOX.high
    """Upper corner [m]."""
    max_thrust: float = 4 * cf2x.THRUST_MAX
    """Largest collective thrust a rate command may ask for [N]."""
    max_rate: float = 10.0
    """Largest body rate a rate command may ask for [rad/s] (the policies' 8 rad/s fits)."""

    def __post_init__(self) -> None:
        for name in ("watchdog_timeout", "hover_time", "land_speed", "max_thrust", "max_rate"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"FailsafeConfig.{name}: must be finite and > 0, got {value}")
        if not (math.isfinite(self.land_height) and self.land_height >= 0):
            raise ConfigError(f"FailsafeConfig.land_height: must be >= 0, got {self.land_height}")
        try:
            WorkspaceBox(self.workspace_low, self.workspace_high)
        except ConfigError as exc:
            raise ConfigError(f"FailsafeConfig.workspace_low/high: {exc}") from exc

    @classmethod
    def from_control_config(cls, cfg: ControlConfig, max_rate: float = 10.0) -> FailsafeConfig:
        """The quadrotor and safety sections of ``controllers/cf2x.yaml``."""
        quad, safety = cfg.quadrotor, cfg.safety
        if quad is None:
            raise ConfigError(f"{cfg.robot}: no quadrotor section for the Crazyflie fail-safe")
        box = safety.workspace
        low, high = (box.low, box.high) if box is not None else ((-1e3,) * 3, (1e3,) * 3)
        return cls(watchdog_timeout=safety.watchdog_timeout, hover_time=quad.hover_time, land_speed=quad.land_speed,
                   land_height=quad.land_height, workspace_low=low, workspace_high=high, max_rate=max_rate)


@dataclass(frozen=True)
class PositionCommand:
    """Fly to a world position with a heading (generic commander position setpoint)."""

    position: np.ndarray
    """World position [m]."""
    yaw: float = 0.0
    """Heading [rad]."""


@dataclass(frozen=True)
class RateCommand:
    """Collective thrust and body rates (classic commander in rate mode)."""

    thrust: float
    """Collective thrust [N]."""
    rates: np.ndarray
    """Body rates [rad/s] (x forward, y left, z up)."""


Command = PositionCommand | RateCommand


@dataclass(frozen=True)
class Setpoint:
    """What to send this tick: ``stop`` (motors off), ``position`` or ``rates``; ``none`` sends nothing."""

    kind: str
    """stop | position | rates | none."""
    position: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Position setpoint [m] (kind position)."""
    yaw: float = 0.0
    """Heading [rad] (kind position)."""
    thrust: float = 0.0
    """Collective thrust [N] (kind rates)."""
    rates: np.ndarray = field(default_factory=lambda: np.zeros(3))
    """Body rates [rad/s] (kind rates)."""


class CrazyflieFailsafe:
    """The bridge's mode machine; call :meth:`update` every tick with the latest state."""

    def __init__(self, config: FailsafeConfig) -> None:
        self.config = config
        self.box = WorkspaceBox(config.workspace_low, config.workspace_high)
        self.mode = FlightMode.MOTORS_OFF
        self.reason = "connected: motors off until the first command"
        self.transitions: list[tuple[float, str, str]] = []
        """(stamp, mode, reason) of every transition, newest last (bounded)."""
        self.rejected = 0
        self.last_refusal = ""
        """Why the last command was refused."""
        self.estopped = False
        self.link_up = False
        self._command: Command | None = None
        self._command_stamp = -math.inf
        self._hold = np.zeros(3)
        self._hold_yaw = 0.0
        self._since = 0.0
        self._floor_since: float | None = None

    # --- inputs -----------------------------------------------------------------------------------------------
    def check(self, command: Command) -> Command:
        """``command`` with validated fields, or :class:`TargetRejected` naming what is wrong."""
        cfg = self.config
        if isinstance(command, PositionCommand):
            position = as_vector("position", command.position, 3)
            yaw = float(as_vector("yaw", command.yaw, 1)[0])
            if not self.box.contains(position):
                raise TargetRejected(f"position {np.round(position, 3).tolist()} outside the workspace box "
                                     f"{list(self.box.low)}..{list(self.box.high)}")
            return PositionCommand(position, yaw)
        if isinstance(command, RateCommand):
            thrust = float(as_vector("thrust", command.thrust, 1)[0])
            rates = as_vector("body rates", command.rates, 3)
            if not 0.0 <= thrust <= cfg.max_thrust:
                raise TargetRejected(f"thrust {thrust:.4g} N outside [0, {cfg.max_thrust:.4g}] N")
            if np.any(np.abs(rates) > cfg.max_rate):
                raise TargetRejected(f"body rates {np.round(rates, 3).tolist()} exceed {cfg.max_rate:g} rad/s")
            return RateCommand(thrust, rates)
        raise TargetRejected(f"unknown command {type(command).__name__}")

    def command(self, command: Command, now: float) -> None:
        """Accept a command (it is followed while fresh), or raise :class:`TargetRejected` and change nothing."""
        try:
            if self.estopped:
                raise TargetRejected("e-stop engaged")
            checked = self.check(command)
        except TargetRejected as exc:
            self.rejected += 1
            self.last_refusal = str(exc)
            raise
        self._command, self._command_stamp = checked, now

    def estop(self, engaged: bool, now: float, reason: str = "e-stop") -> None:
        """Latch (motors off now) or clear the e-stop; clearing leaves the motors off until a new command."""
        if engaged and not self.estopped:
            self.estopped = True
            self._command = None
            self._enter(FlightMode.MOTORS_OFF, now, f"{reason}: motors off")
        elif not engaged and self.estopped:
            self.estopped = False
            self.reason = "e-stop cleared: motors off until the next command"
            self._log(now)

    def link(self, up: bool, now: float, reason: str = "") -> None:
        """The link came back (``up``) or was lost."""
        if up != self.link_up:
            self.link_up = up
            self.reason = reason or ("link up" if up else "link lost")
            self._log(now)

    # --- the tick ---------------------------------------------------------------------------------------------
    @property
    def reported_mode(self) -> FlightMode:
        """:attr:`mode`, or LINK_LOST while the link is down."""
        return self.mode if self.link_up else FlightMode.LINK_LOST

    def update(self, state: StateSample | None, now: float) -> Setpoint:
        """The setpoint for this tick given the newest state (None: none received yet)."""
        cfg = self.config
        fresh = self._command is not None and now - self._command_stamp <= cfg.watchdog_timeout
        if self.estopped:
            return self._off()
        if fresh and state is not None and self.mode != FlightMode.FLYING:
            self._enter(FlightMode.FLYING, now, f"following {type(self._command).__name__}")
        if self.mode == FlightMode.FLYING:
            if state is None:
                return self._off()
            if not self.box.contains(state.position):
                self._start_hover(state, now, f"left the workspace box at {np.round(state.position, 3).tolist()}")
            elif not fresh:
                age = now - self._command_stamp
                self._start_hover(state, now, f"stale command: none for {age:.3f} s (timeout {cfg.watchdog_timeout} s)")
            else:
                name = type(self._command).__name__
                if not self.reason.endswith(name):
                    self.reason = f"following {name}"
                    self._log(now)
                return self._follow()
        if self.mode == FlightMode.HOVER:
            if now - self._since >= cfg.hover_time:
                self._enter(FlightMode.LANDING, now, f"no command for {cfg.hover_time:g} s of hover: landing")
            else:
                return Setpoint("position", self._hold.copy(), self._hold_yaw)
        if self.mode == FlightMode.LANDING:
            return self._land(state, now)
        return self._off()

    # --- helpers ----------------------------------------------------------------------------------------------
    def _follow(self) -> Setpoint:
        command = self._command
        if isinstance(command, PositionCommand):
            return Setpoint("position", command.position.copy(), command.yaw)
        assert isinstance(command, RateCommand)
        return Setpoint("rates", thrust=command.thrust, rates=command.rates.copy())

    def _start_hover(self, state: StateSample, now: float, reason: str) -> None:
        self._hold = self.box.clip(state.position)
        self._hold_yaw = state.yaw
        self._command = None
        self._enter(FlightMode.HOVER, now, reason + f": hovering at {np.round(self._hold, 3).tolist()}")

    def _land(self, state: StateSample | None, now: float) -> Setpoint:
        cfg = self.config
        z = self._hold[2] - cfg.land_speed * (now - self._since)
        if z <= 0.0 and self._floor_since is None:
            self._floor_since = now
        sinking = state is not None and abs(float(state.velocity[2])) >= 0.05
        settled = self._floor_since is not None and now - self._floor_since >= 0.5 and not sinking
        if (state is not None and state.position[2] <= cfg.land_height) or settled:
            self._enter(FlightMode.MOTORS_OFF, now, "landed: motors off")
            return self._off()
        return Setpoint("position", np.array([self._hold[0], self._hold[1], max(z, 0.0)]), self._hold_yaw)

    @staticmethod
    def _off() -> Setpoint:
        return Setpoint("stop")

    def _enter(self, mode: FlightMode, now: float, reason: str) -> None:
        self.mode, self.reason, self._since = mode, reason, now
        self._floor_since = None
        self._log(now)

    def _log(self, now: float) -> None:
        self.transitions.append((now, self.reported_mode.value, self.reason))
        del self.transitions[:-50]
