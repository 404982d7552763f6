"""What the emulated PX4's command handling and telemetry see of the vehicle, below both.

:class:`EmulatedVehicle` is the part of :class:`~robot_rl.hardware.px4_emulator.Px4Emulator` that
:mod:`~robot_rl.hardware.px4_commands` and :mod:`~robot_rl.hardware.px4_telemetry` use (a structural type, so
neither imports the emulator), plus the vehicle's models they share: its true state (:class:`Body`), the
global reference of its local frame (:class:`GeoFrame`, PX4's ``MapProjection``) and its battery
(:class:`BatteryModel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from robot_rl.control.base import RobotState
from robot_rl.control.quadrotor import QuadrotorController
from robot_rl.hardware.px4_auto import AutoModes, Carrot
from robot_rl.sim.backend import MujocoBackend

EARTH_RADIUS = 6371000.0
"""PX4's ``CONSTANTS_RADIUS_OF_EARTH`` [m]."""
SITL_HOME = (47.397742, 8.545594, 488.0)
"""PX4 SITL's default home (lat [deg], lon [deg], alt AMSL [m])."""


@dataclass(frozen=True)
class GeoFrame:
    """The local NED frame's global reference (PX4's EKF origin): lat/lon [deg] and altitude AMSL [m]."""

    lat: float = SITL_HOME[0]
    lon: float = SITL_HOME[1]
    alt: float = SITL_HOME[2]

    def __post_init__(self) -> None:
        if not (-90 < self.lat < 90 and -180 <= self.lon <= 180 and math.isfinite(self.alt)):
            raise ValueError(f"bad reference lat/lon/alt {self.lat}, {self.lon}, {self.alt}")

    def to_global(self, ned: np.ndarray) -> tuple[float, float, float]:
        """(lat, lon, alt AMSL) of a local NED position (PX4 ``MapProjection::reproject``)."""
        x, y = float(ned[0]) / EARTH_RADIUS, float(ned[1]) / EARTH_RADIUS
        lat0, lon0 = math.radians(self.lat), math.radians(self.lon)
        c = math.hypot(x, y)
        if c == 0.0:
            return self.lat, self.lon, self.alt - float(ned[2])
        sin_c, cos_c = math.sin(c), math.cos(c)
        lat = math.asin(cos_c * math.sin(lat0) + x * sin_c * math.cos(lat0) / c)
        lon = lon0 + math.atan2(y * sin_c, c * math.cos(lat0) * cos_c - x * math.sin(lat0) * sin_c)
        return math.degrees(lat), math.degrees(lon), self.alt - float(ned[2])

    def to_local(self, lat: float, lon: float, alt: float) -> np.ndarray:
        """Local NED position of a global one (PX4 ``MapProjection::project``; the angle by haversine)."""
        lat0, lon0, lat1, lon1 = map(math.radians, (self.lat, self.lon, lat, lon))
        h = math.sin((lat1 - lat0) / 2) ** 2 + math.cos(lat0) * math.cos(lat1) * math.sin((lon1 - lon0) / 2) ** 2
        c = 2 * math.asin(min(1.0, math.sqrt(h)))
        k = c / math.sin(c) if c > 0 else 1.0
        north = k * (math.cos(lat0) * math.sin(lat1) - math.sin(lat0) * math.cos(lat1) * math.cos(lon1 - lon0))
        east = k * math.cos(lat1) * math.sin(lon1 - lon0)
        return np.array([north * EARTH_RADIUS, east * EARTH_RADIUS, self.alt - alt])


@dataclass
class BatteryModel:
    """A 1S LiPo: charge drained by an assumed current, open-circuit voltage linear in the charge left."""

    capacity_mah: float = 250.0
    """The Crazyflie 2.x battery."""
    empty_v: float = 3.5
    full_v: float = 4.2
    idle_a: float = 0.3
    """Current drawn by the electronics [A]."""
    hover_a: float = 2.0
    """Extra current at hover thrust [A], scaled with the thrust."""
    resistance: float = 0.05
    """Internal resistance [ohm]."""
    discharged_mah: float = 0.0
    current_a: float = 0.0

    def update(self, dt: float, armed: bool, thrust_ratio: float) -> None:
        """Drain for ``dt`` seconds at ``thrust_ratio`` (total thrust / hover thrust) when armed."""
        self.current_a = self.idle_a + (self.hover_a * max(thrust_ratio, 0.0) if armed else 0.0)
        self.discharged_mah += self.current_a * dt / 3.6

    @property
    def remaining(self) -> float:
        """Charge left in [0, 1]."""
        return float(np.clip(1.0 - self.discharged_mah / self.capacity_mah, 0.0, 1.0))

    @property
    def voltage(self) -> float:
        """Terminal voltage [V] under the present current."""
        return self.empty_v + (self.full_v - self.empty_v) * self.remaining - self.resistance * self.current_a


@dataclass(frozen=True)
class Body:
    """The vehicle's true state: position [m] and quaternion (w, x, y, z) in ENU, world velocity, FLU body rates."""

    pos: np.ndarray
    quat: np.ndarray
    linvel: np.ndarray
    angvel: np.ndarray


class VehicleConfig(Protocol):
    """The emulator settings commands and telemetry read."""

    @property
    def tick_hz(self) -> float:
        """Emulator loop rate [Hz]: the fastest a stream may be asked for."""

    @property
    def system_id(self) -> int:
        """MAVLink system id of the vehicle."""


class EmulatedVehicle(Protocol):
    """The emulator as its command handler and telemetry streams see it."""

    params: dict[str, float]
    mav: mavlink.MAVLink
    intervals: dict[int, float]
    """Stream intervals [s] by message id."""
    next_send: dict[int, float]
    """When each stream is next due [s]."""
    armed: bool
    airborne: bool
    mode: int
    auto: AutoModes
    carrot: Carrot
    origin: np.ndarray
    geo: GeoFrame
    battery: BatteryModel
    failsafe_since: float | None
    controller: QuadrotorController
    backend: MujocoBackend

    @property
    def config(self) -> VehicleConfig:
        """The emulator's settings."""

    def event(self, text: str, severity: int = ...) -> None:
        """Log a mode or arming event and send it as STATUSTEXT."""

    def time_ms(self, now: float) -> int:
        """time_boot_ms of a message sent at ``now``."""

    def time_us(self, now: float) -> int:
        """time_usec since boot of a message sent at ``now``."""

    def state(self) -> RobotState:
        """The controller's view of the vehicle."""

    def body(self) -> Body:
        """The vehicle's true state."""

    def local_ned(self, enu: np.ndarray) -> np.ndarray:
        """A world ENU position in the local NED frame (origin at boot)."""

    def stream_alive(self, now: float) -> bool:
        """Whether offboard setpoints arrive fast enough."""

    def landed(self) -> bool:
        """Whether the land detector would say landed."""

    def can_arm(self, now: float) -> str | None:
        """Why arming would be refused now, or None."""

    def set_mode(self, mode: int, why: str) -> None:
        """Switch to a PX4 custom mode."""

    def arm(self, now: float, forced: bool) -> None:
        """Arm (home set here)."""

    def disarm(self, why: str) -> None:
        """Disarm: motors off."""
