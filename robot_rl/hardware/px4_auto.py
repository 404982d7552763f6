"""PX4's AUTO modes for the emulated multirotor: Takeoff, Hold (with reposition), Return and Land.

Behaviour follows PX4 v1.15's navigator as documented in the PX4 user guide (https://docs.px4.io/main/en/
flight_modes_mc/): Takeoff climbs vertically at ``MPC_TKO_SPEED`` to ``MIS_TAKEOFF_ALT`` above home (or the
altitude MAV_CMD_NAV_TAKEOFF gives) and then switches to Hold; Hold keeps the position where it started, and a
MAV_CMD_DO_REPOSITION (MAVSDK ``goto_location``) moves its target, flown at ``MPC_XY_CRUISE``; Return climbs to
``RTL_RETURN_ALT`` above home (if lower), flies to home and lands there, still reporting AUTO.RTL; Land descends
at ``MPC_LAND_SPEED``. Each is a carrot (a position target moved toward a goal at a limited speed, with the
speed as velocity feed-forward) for the position controller standing in for PX4's.

Not reproduced: RTL's cone and descend altitude, mission landings or rally points, yaw towards the goal
(heading is kept unless a reposition gives one), smooth jerk-limited trajectories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from robot_rl.hardware.px4_codec import MAIN_AUTO, custom_mode

SUB_TAKEOFF, SUB_RTL = 2, 5
TAKEOFF = custom_mode(MAIN_AUTO, SUB_TAKEOFF)
RTL = custom_mode(MAIN_AUTO, SUB_RTL)
ARRIVED = 0.05
"""Distance [m] at which a carrot that reached its goal counts the vehicle as arrived."""
AIRBORNE = 0.15
"""Height above the ground [m] from which the vehicle counts as having taken off."""


@dataclass
class Carrot:
    """A position target (ENU) moved toward ``goal`` at most ``speed_xy`` / ``speed_z`` [m/s]."""

    position: np.ndarray
    yaw: float
    goal: np.ndarray | None = None
    speed_xy: float = 1.0
    speed_z: float = 0.5
    accel: float = 1.0
    """Acceleration limit of the carrot [m/s^2]: it speeds up and slows down instead of jumping (PX4 limits
    acceleration and jerk the same way, with ``MPC_ACC_HOR`` / ``MPC_JERK_AUTO``)."""
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def step(self, dt: float) -> None:
        """Advance toward the goal by one tick; the velocity feed-forward is the carrot's own speed."""
        if self.goal is None:
            self.velocity = np.zeros(3)
            return
        delta = self.goal - self.position
        xy, z = delta[:2], delta[2]
        dist_xy = float(np.linalg.norm(xy))
        v_xy = min(self.speed_xy, math.sqrt(2 * self.accel * dist_xy),
                   float(np.linalg.norm(self.velocity[:2])) + self.accel * dt)
        v_z = min(self.speed_z, math.sqrt(2 * self.accel * abs(z)), abs(float(self.velocity[2])) + self.accel * dt)
        step_xy = xy if dist_xy <= max(v_xy * dt, 1e-3) else xy / dist_xy * v_xy * dt
        step_z = float(np.clip(z, -max(v_z * dt, 1e-3), max(v_z * dt, 1e-3)))
        step = np.array([step_xy[0], step_xy[1], step_z])
        self.position = self.position + step
        self.velocity = step / dt if dt > 0 else np.zeros(3)

    def reached(self) -> bool:
        """Whether the carrot sits on its goal (or has none)."""
        return self.goal is None or bool(np.linalg.norm(self.goal - self.position) < 1e-6)


class AutoModes:
    """Goals of the AUTO modes, in the emulator's ENU world frame; ``home`` is where Return lands."""

    def __init__(self, params: dict[str, float], ground_z: float) -> None:
        self.params = params
        self.ground_z = ground_z
        self.home = np.zeros(3)
        self.rtl_phase = ""
        """"climb", "return", "land" while in Return."""

    def takeoff(self, carrot: Carrot, altitude_above_home: float | None) -> None:
        """Climb straight up to the takeoff altitude (``MIS_TAKEOFF_ALT`` unless the command gave one)."""
        alt = self.params["MIS_TAKEOFF_ALT"] if altitude_above_home is None else altitude_above_home
        carrot.goal = np.array([carrot.position[0], carrot.position[1], self.home[2] + alt])
        carrot.speed_z = self.params["MPC_TKO_SPEED"]

    def reposition(self, carrot: Carrot, goal: np.ndarray, yaw: float | None) -> None:
        """Fly to ``goal`` (ENU) at cruise speed, then hold there."""
        carrot.goal = np.asarray(goal, dtype=np.float64)
        carrot.speed_xy = self.params["MPC_XY_CRUISE"]
        carrot.speed_z = self.params["MPC_Z_VEL_MAX_UP"]
        if yaw is not None and math.isfinite(yaw):
            carrot.yaw = yaw

    def start_rtl(self, carrot: Carrot) -> None:
        """Return: climb to RTL_RETURN_ALT above home if lower, then fly home, then land."""
        self.rtl_phase = "climb"
        z = max(carrot.position[2], self.home[2] + self.params["RTL_RETURN_ALT"])
        carrot.goal = np.array([carrot.position[0], carrot.position[1], z])
        carrot.speed_z = self.params["MPC_Z_VEL_MAX_UP"]

    def rtl_step(self, carrot: Carrot, pos: np.ndarray) -> bool:
        """Advance Return's phases; True once it is landing (the caller then runs the Land descent)."""
        if self.rtl_phase == "climb" and carrot.reached() and abs(pos[2] - carrot.position[2]) < ARRIVED:
            self.rtl_phase = "return"
            carrot.goal = np.array([self.home[0], self.home[1], carrot.position[2]])
            carrot.speed_xy = self.params["MPC_XY_CRUISE"]
        elif (self.rtl_phase == "return" and carrot.reached()
              and np.linalg.norm(pos[:2] - carrot.position[:2]) < ARRIVED):
            self.rtl_phase = "land"
            carrot.goal = None
        return self.rtl_phase == "land"

    def land_step(self, carrot: Carrot, pos: np.ndarray, dt: float) -> np.ndarray:
        """Descend at MPC_LAND_SPEED (the carrot never more than the vehicle's height above it); the feed-forward."""
        speed = self.params["MPC_LAND_SPEED"]
        carrot.goal = None
        carrot.position[2] = max(min(carrot.position[2] - speed * dt, pos[2]), self.ground_z - 0.1)
        return np.array([0.0, 0.0, -speed])

    def takeoff_done(self, carrot: Carrot, pos: np.ndarray) -> bool:
        """Whether Takeoff reached its altitude (then PX4 switches to Hold)."""
        return carrot.reached() and abs(pos[2] - carrot.position[2]) < ARRIVED
