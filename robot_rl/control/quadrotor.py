"""Cascaded quadrotor control: position -> attitude -> body rates -> motor mixing.

Position PID gives a desired acceleration; the thrust vector ``m (a + g)`` sets the collective
thrust and the desired body z axis (tilt-limited), yaw completes the desired attitude; an attitude
P loop on the SO(3) error commands body rates; a rate P loop with gyroscopic feed-forward gives
body torques; the mixer turns (thrust, torques) into per-rotor thrusts, saturating yaw first.
:class:`ThrustCurve` maps thrusts to normalised motor commands (real ESCs) and
:class:`MotorModel` is the first-order motor lag a simulator applies to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import robot_rl.control.kernels as kernels
from robot_rl.control.base import Controller, RobotState, TargetRejected
from robot_rl.control.kernels import CompiledLaw
from robot_rl.control.rotations import quat_to_mat, quat_yaw
from robot_rl.control.targets import BodyRateTarget, FlightTarget
from robot_rl.core.config import ConfigError


@dataclass(frozen=True)
class QuadrotorParams:
    """Physical parameters of one quadrotor (from ``robot_rl.robots.<robot>``)."""

    mass: float
    """Total mass [kg]."""
    inertia: tuple[float, float, float]
    """Diagonal body inertia [kg m^2]."""
    rotor_positions: tuple[tuple[float, float, float], ...]
    """Rotor positions in the body frame [m] (x forward, y left, z up)."""
    yaw_signs: tuple[float, ...]
    """Sign of each rotor's reaction torque about body z."""
    thrust_to_torque: float
    """Yaw reaction torque per unit thrust [Nm/N]."""
    thrust_max: float
    """Largest thrust per rotor [N]."""
    motor_time_constant: float
    """First-order motor lag [s]."""
    gravity: float = 9.81
    """Gravitational acceleration [m/s^2]."""

    def __post_init__(self) -> None:
        if len(self.rotor_positions) != 4 or len(self.yaw_signs) != 4:
            raise ConfigError("QuadrotorParams: exactly 4 rotors are supported")
        if self.mass <= 0 or min(self.inertia) <= 0 or self.thrust_max <= 0 or self.motor_time_constant < 0:
            raise ConfigError("QuadrotorParams: mass, inertia and thrust_max must be > 0")
        if 4 * self.thrust_max <= self.mass * self.gravity:
            raise ConfigError("QuadrotorParams: the rotors cannot lift the mass")

    def mixer(self) -> np.ndarray:
        """4x4 matrix: per-rotor thrusts -> (collective thrust, roll, pitch, yaw torques)."""
        pos = np.asarray(self.rotor_positions)
        return np.stack([np.ones(4), pos[:, 1], -pos[:, 0], np.asarray(self.yaw_signs) * self.thrust_to_torque])


@dataclass(frozen=True)
class QuadrotorConfig:
    """Gains and limits of :class:`QuadrotorController` (``quadrotor:`` section)."""

    pos_kp: tuple[float, float, float] = (6.0, 6.0, 8.0)
    """Position gain [1/s^2] per world axis."""
    pos_kd: tuple[float, float, float] = (4.4, 4.4, 5.1)
    """Velocity gain [1/s] per world axis."""
    pos_ki: tuple[float, float, float] = (0.0, 0.0, 1.0)
    """Integral gain [1/s^3] per world axis (rejects a mass error)."""
    integral_limit: float = 2.0
    """Anti-windup clamp on the integral acceleration [m/s^2]."""
    max_accel: float = 8.0
    """Clip of the commanded horizontal acceleration [m/s^2]."""
    max_tilt: float = 0.6
    """Largest commanded tilt [rad]."""
    att_kp: tuple[float, float, float] = (8.0, 8.0, 4.0)
    """Attitude gain: body-rate command per rad of error [1/s]."""
    max_rate: float = 6.0
    """Clip of commanded body rates [rad/s]."""
    rate_kp: tuple[float, float, float] = (25.0, 25.0, 12.0)
    """Rate gain: angular acceleration per rad/s of rate error [1/s]."""
    motor_bandwidth: float = 30.0
    """Motor-lag compensation [1/s]: rotor commands lead an internal motor model so thrusts follow
    with this bandwidth instead of ``1 / motor_time_constant`` (0 disables; needs headroom)."""
    hover_time: float = 2.0
    """Fail-safe: hover this long [s] after a stale target before landing."""
    land_speed: float = 0.3
    """Fail-safe descent speed [m/s]."""
    land_height: float = 0.02
    """Height [m] at which the fail-safe landing switches the motors off (also off once the setpoint
    has reached the floor for 0.5 s and the vehicle no longer sinks)."""

    def __post_init__(self) -> None:
        for name in ("pos_kp", "pos_kd", "pos_ki", "att_kp", "rate_kp"):
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != (3,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ConfigError(f"QuadrotorConfig.{name}: needs 3 finite values >= 0")
        if not (np.isfinite(self.motor_bandwidth) and self.motor_bandwidth >= 0):
            raise ConfigError("QuadrotorConfig.motor_bandwidth: must be finite and >= 0")
        for name in ("integral_limit", "max_accel", "max_tilt", "max_rate", "hover_time", "land_speed"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"QuadrotorConfig.{name}: must be > 0")
        if not self.max_tilt < np.pi / 2:
            raise ConfigError("QuadrotorConfig.max_tilt: must be below pi/2")


@dataclass(frozen=True)
class ThrustCurve:
    """Thrust as a function of the normalised motor command u in [0, 1]: ``max (a u^2 + (1 - a) u)``."""

    thrust_max: float
    """Thrust at u = 1 [N]."""
    quadratic: float = 1.0
    """Share a of the quadratic term (1: thrust ∝ u^2, as for a propeller at speed ∝ u)."""

    def thrust(self, u: np.ndarray) -> np.ndarray:
        """Thrust [N] of commands ``u``."""
        u = np.clip(u, 0.0, 1.0)
        return self.thrust_max * (self.quadratic * u * u + (1 - self.quadratic) * u)

    def command(self, thrust: np.ndarray) -> np.ndarray:
        """Command in [0, 1] producing ``thrust`` (inverse of :meth:`thrust`)."""
        f = np.clip(np.asarray(thrust, dtype=np.float64) / self.thrust_max, 0.0, 1.0)
        a = self.quadratic
        if a == 0:
            return f
        b = 1 - a
        return (-b + np.sqrt(b * b + 4 * a * f)) / (2 * a)


class MotorModel:
    """First-order motor lag ``tau dT/dt = T_cmd - T`` (exact discretisation), for simulators."""

    def __init__(self, time_constant: float, dt: float, n: int = 4) -> None:
        self.alpha = 1.0 if time_constant <= 0 else 1.0 - float(np.exp(-dt / time_constant))
        self.thrust = np.zeros(n)

    def reset(self, thrust: np.ndarray) -> None:
        """Set the spun-up thrusts (e.g. to hover at the start of an episode)."""
        self.thrust = np.asarray(thrust, dtype=np.float64).copy()

    def step(self, command: np.ndarray) -> np.ndarray:
        """Advance one physics step towards ``command``; returns the produced thrusts."""
        self.thrust += self.alpha * (command - self.thrust)
        return self.thrust.copy()


def cross3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross product of two 3-vectors (``np.cross`` costs ~10x more at this size)."""
    a0, a1, a2 = a.tolist()
    b0, b1, b2 = b.tolist()
    return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])


_ZERO3 = np.zeros(3)  # an absent feed-forward for the compiled law (never written)


class QuadrotorController(CompiledLaw, Controller):
    """Cascaded position/attitude/rate controller; ``compute`` returns per-rotor thrusts [N] (4 values).

    The simulator maps them to its actuators (thrust + yaw-torque motors) through a motor model;
    a real vehicle maps them to ESC commands with :class:`ThrustCurve`. After the fail-safe logic,
    ``compute`` runs the compiled law (:func:`robot_rl.control.kernels.compiled.quadrotor_thrusts`), which
    equals the numpy reference :meth:`compute_reference` and updates the same memory arrays in place.
    """

    def __init__(self, config: QuadrotorConfig, params: QuadrotorParams) -> None:
        self.config = config
        self.params = params
        self.inertia = np.asarray(params.inertia, dtype=np.float64)
        self.mixer_inv = np.linalg.inv(params.mixer())
        self._pos_kp, self._pos_kd, self._pos_ki = (np.asarray(v, dtype=np.float64)
                                                    for v in (config.pos_kp, config.pos_kd, config.pos_ki))
        self._att_kp = np.asarray(config.att_kp, dtype=np.float64)
        self._rate_kp = np.asarray(config.rate_kp, dtype=np.float64)
        self._target: FlightTarget | None = None
        self._rates: BodyRateTarget | None = None
        self._integral = np.zeros(3)
        self._last_stamp = np.full(1, np.nan)
        """Stamp of the last compute (NaN: none yet); an array so the compiled law updates it in place."""
        self._hold_since: float | None = None
        self._hold_z = 0.0
        self._motor_est = np.full(4, params.mass * params.gravity / 4)
        self.landed = False
        """True once the fail-safe landing has switched the motors off."""
        self._params: np.ndarray | None = None
        self._gains: np.ndarray | None = None
        self._init_kernels()

    def _prepare_kernels(self) -> None:
        self._params, self._gains = self.kernel_params()

    def kernel_params(self) -> tuple[np.ndarray, np.ndarray]:
        """The compiled law's ``p`` (layout: the ``QP_*`` names of the kernels module) and (5, 3) ``gains``."""
        k = kernels.load()
        if k is None:
            raise RuntimeError(f"compiled kernels unavailable: {kernels.unavailable_reason()}")
        cfg, prm = self.config, self.params
        p = np.zeros(k.QP_SIZE)
        p[k.QP_MASS], p[k.QP_GRAVITY], p[k.QP_THRUST_MAX] = prm.mass, prm.gravity, prm.thrust_max
        p[k.QP_MOTOR_TAU], p[k.QP_BANDWIDTH] = prm.motor_time_constant, cfg.motor_bandwidth
        p[k.QP_INTEGRAL_LIMIT], p[k.QP_MAX_ACCEL] = cfg.integral_limit, cfg.max_accel
        p[k.QP_MAX_TILT], p[k.QP_MAX_RATE] = cfg.max_tilt, cfg.max_rate
        return p, np.array([cfg.pos_kp, cfg.pos_kd, cfg.pos_ki, cfg.att_kp, cfg.rate_kp], dtype=np.float64)

    @property
    def n_commands(self) -> int:
        """One thrust per rotor."""
        return 4

    def kernel_memory(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The law's memory as the compiled law takes it (integral, motor estimate, last stamp): live arrays."""
        return self._integral, self._motor_est, self._last_stamp

    def reset(self, state: RobotState) -> None:
        """Hover where the vehicle is, heading kept; forget the integral and any landing."""
        self._target = FlightTarget(self._pos(state), self._yaw(state))
        self._rates = None
        self._integral[:] = 0.0
        self._last_stamp[0] = np.nan
        self._hold_since = None
        self.landed = False
        self._motor_est[:] = self.params.mass * self.params.gravity / 4

    def hold(self, state: RobotState) -> None:
        """Fail-safe: hover here for ``hover_time``, then descend at ``land_speed`` and stop the motors."""
        self.reset(state)
        self._hold_since = float(state.stamp)
        self._hold_z = float(self._pos(state)[2])

    def current_target(self) -> FlightTarget | BodyRateTarget | None:
        """The setpoint being tracked (body rates while a rate target is active)."""
        return self._rates if self._rates is not None else self._target

    def set_target(self, target: object, stamp: float) -> None:
        """Accept a :class:`FlightTarget` (position control) or :class:`BodyRateTarget` (rate control).

        Either ends a fail-safe hover/landing that has not yet landed.
        """
        if isinstance(target, FlightTarget):
            self._target, self._rates = target, None
        elif isinstance(target, BodyRateTarget):
            if target.thrust > 4 * self.params.thrust_max:
                raise TargetRejected(f"BodyRateTarget.thrust: {target.thrust:.3g} N exceeds the rotors' "
                                     f"{4 * self.params.thrust_max:.3g} N")
            self._rates = target
        else:
            raise TargetRejected(f"QuadrotorController: expected a FlightTarget or BodyRateTarget, "
                                 f"got {type(target).__name__}")
        self._hold_since = None

    @staticmethod
    def _pos(state: RobotState) -> np.ndarray:
        if state.base_pos is None or state.base_quat is None or state.base_linvel is None \
                or state.base_angvel is None:
            raise ValueError("QuadrotorController: RobotState needs base_pos, base_quat, base_linvel, base_angvel")
        return state.base_pos.copy()

    @staticmethod
    def _yaw(state: RobotState) -> float:
        return quat_yaw(state.base_quat) if state.base_quat is not None else 0.0

    def compute(self, state: RobotState, stamp: float) -> np.ndarray:
        """Per-rotor thrusts [N] for this tick (the compiled law; the numpy reference without kernels)."""
        return self._compute(state, stamp, self._kernels is not None)

    def compute_reference(self, state: RobotState, stamp: float) -> np.ndarray:
        """:meth:`compute` with the readable numpy law the compiled kernel reproduces."""
        return self._compute(state, stamp, False)

    def _compute(self, state: RobotState, stamp: float, compiled: bool) -> np.ndarray:
        if self._target is None:
            self.reset(state)
        cfg, prm = self.config, self.params
        pos = self._pos(state)
        assert state.base_quat is not None and state.base_linvel is not None and state.base_angvel is not None
        target = self._target
        assert target is not None
        if self._hold_since is not None:
            descent = max(0.0, stamp - self._hold_since - cfg.hover_time) * cfg.land_speed
            z = max(self._hold_z - descent, 0.0)
            # Touched down: below land_height, or the setpoint has been at the floor for 0.5 s while
            # the vehicle no longer sinks (resting on its legs, whatever their height).
            on_floor = descent - self._hold_z > 0.5 * cfg.land_speed and abs(float(state.base_linvel[2])) < 0.05
            if descent > 0 and (pos[2] <= cfg.land_height or on_floor or self.landed):
                self.landed = True
                self._motor_est[:] = 0.0
                return np.zeros(4)
            target = FlightTarget(np.array([target.position[0], target.position[1], z]), target.yaw,
                                  np.array([0.0, 0.0, -cfg.land_speed if descent > 0 and z > 0 else 0.0]))
        rates = self._rates if self._hold_since is None else None
        if compiled:
            assert self._kernels is not None
            out = np.empty(4)
            self._kernels.quadrotor_thrusts(
                pos, state.base_quat, state.base_linvel, state.base_angvel, target.position, float(target.yaw),
                _ZERO3 if target.velocity is None else target.velocity,
                _ZERO3 if target.acceleration is None else target.acceleration, target.acceleration is not None,
                rates is not None, _ZERO3 if rates is None else rates.rates, 0.0 if rates is None else rates.thrust,
                self._params, self._gains, self.inertia, self.mixer_inv, self._integral, self._motor_est,
                self._last_stamp, float(stamp), out)
            return out
        dt = 0.0 if np.isnan(self._last_stamp[0]) else max(0.0, stamp - float(self._last_stamp[0]))
        self._last_stamp[0] = stamp
        if rates is not None:
            return self._lead(self.mix(rates.thrust, self._rate_loop(rates.rates, state.base_angvel)), dt)
        err = target.position - pos
        vel_ref = np.zeros(3) if target.velocity is None else target.velocity
        lim = cfg.integral_limit
        self._integral[:] = np.minimum(np.maximum(self._integral + self._pos_ki * (err * dt), -lim), lim)
        acc = self._pos_kp * err + self._pos_kd * (vel_ref - state.base_linvel) + self._integral
        if target.acceleration is not None:
            acc = acc + target.acceleration
        horiz = np.linalg.norm(acc[:2])
        if horiz > cfg.max_accel:
            acc[:2] *= cfg.max_accel / horiz
        force = prm.mass * (acc + np.array([0.0, 0.0, prm.gravity]))
        force[2] = max(force[2], 0.1 * prm.mass * prm.gravity)
        # Limit the tilt of the thrust vector, keeping its vertical part.
        max_h = force[2] * np.tan(cfg.max_tilt)
        fh = np.linalg.norm(force[:2])
        if fh > max_h:
            force[:2] *= max_h / fh
        rot = quat_to_mat(state.base_quat)
        thrust = float(force @ rot[:, 2])
        b3 = force / np.linalg.norm(force)
        heading = np.array([np.cos(target.yaw), np.sin(target.yaw), 0.0])
        b2 = cross3(b3, heading)
        b2 /= np.linalg.norm(b2)
        rot_des = np.column_stack([cross3(b2, b3), b2, b3])
        e_mat = rot_des.T @ rot - rot.T @ rot_des
        e_rot = 0.5 * np.array([e_mat[2, 1], e_mat[0, 2], e_mat[1, 0]])
        rate_cmd = np.minimum(np.maximum(-self._att_kp * e_rot, -cfg.max_rate), cfg.max_rate)
        return self._lead(self.mix(thrust, self._rate_loop(rate_cmd, state.base_angvel)), dt)

    def _rate_loop(self, rate_cmd: np.ndarray, omega: np.ndarray) -> np.ndarray:
        """Body torques: P on the rate error times inertia, plus the gyroscopic term ω x Jω."""
        return self.inertia * (self._rate_kp * (rate_cmd - omega)) + cross3(omega, self.inertia * omega)

    def _lead(self, desired: np.ndarray, dt: float) -> np.ndarray:
        """Rotor commands that make lagging motors reach ``desired`` at ``motor_bandwidth``."""
        tau, bw = self.params.motor_time_constant, self.config.motor_bandwidth
        if tau <= 0 or bw <= 0:
            return desired
        cmd = np.clip(self._motor_est + tau * bw * (desired - self._motor_est), 0.0, self.params.thrust_max)
        if dt > 0:
            self._motor_est += (1.0 - np.exp(-dt / tau)) * (cmd - self._motor_est)
        return cmd

    def mix(self, thrust: float, torque: np.ndarray) -> np.ndarray:
        """Per-rotor thrusts for a collective thrust and body torques; yaw is given up first when saturated."""
        tmax = self.params.thrust_max
        rotors = self.mixer_inv @ np.array([thrust, *torque])
        if np.any(rotors < 0) or np.any(rotors > tmax):
            rotors = self.mixer_inv @ np.array([thrust, torque[0], torque[1], 0.0])
        return np.clip(rotors, 0.0, tmax)
