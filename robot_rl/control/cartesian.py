"""Cartesian impedance / operational-space control with nullspace posture control (CRISP-style law).

Per tick: EMA-filter the target pose and stiffness, pose error (translation and rotation apart,
world frame), per-axis error clip, task torque ``J^T (K e + D (v* - J dq))`` (impedance) or
``J^T Λ (K e + D (v* - J dq))`` (operational space; v* is the target twist, zero unless given),
nullspace posture torque projected with the kinematic (``I - J⁺J``) or dynamic (``I - Jᵀ J̄ᵀ``)
projector, joint-limit repulsion, feed-forward wrench, torque-rate limit on the control part, then
gravity/Coriolis compensation and the effort limits.

Every damping term is ``2 ζ sqrt(k)`` with ζ >= 0 checked in the config: CRISP's nullspace damping
default of -1 meaning "auto" is not carried over (a negative damping term would pump energy in).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

import robot_rl.control.kernels as kernels
from robot_rl.control.arm_model import MujocoArmModel
from robot_rl.control.base import Controller, RobotState, TargetRejected
from robot_rl.control.joint_pd import per_joint
from robot_rl.control.kernels import CompiledLaw
from robot_rl.control.kernels.mujoco_c import address
from robot_rl.control.rotations import mat_to_quat
from robot_rl.control.targets import JointTarget, PoseTarget, StiffnessTarget, WrenchTarget
from robot_rl.core.config import ConfigError
from robot_rl.core.embodiment import Embodiment

PROJECTORS = ("kinematic", "dynamic", "none")


@dataclass(frozen=True)
class CartesianConfig:
    """Gains and limits of :class:`CartesianImpedanceController` (``cartesian:`` section)."""

    stiffness: tuple[float, float, float, float, float, float] = (500.0, 500.0, 500.0, 30.0, 30.0, 30.0)
    """Task stiffness kx, ky, kz [N/m], krx, kry, krz [Nm/rad] (CRISP defaults)."""
    damping_ratio: float = 1.0
    """ζ in ``d = 2 ζ sqrt(k)``: critical for unit mass (impedance) or exactly critical (operational space)."""
    damping: tuple[float, float, float, float, float, float] | None = None
    """Explicit task damping [N s/m, Nm s/rad] replacing ``2 ζ sqrt(k)`` (None: derived from stiffness)."""
    max_stiffness: tuple[float, float] = (900.0, 60.0)
    """Clamp for variable stiffness targets: translational [N/m], rotational [Nm/rad] (CRISP's)."""
    error_clip: tuple[float, float] = (0.1, 0.5)
    """Per-axis pose error clip: translation [m], rotation [rad]; tight clips keep contact forces low."""
    operational_space: bool = False
    """Shape the task with the task-space inertia Λ (OSC) instead of plain impedance."""
    osc_regularization: float = 0.01
    """Added to ``J M⁻¹ Jᵀ`` before inverting it for Λ (keeps Λ finite near singularities)."""
    nullspace_projector: str = "kinematic"
    """``kinematic`` (I - J⁺J), ``dynamic`` (inertia-weighted) or ``none``."""
    nullspace_stiffness: tuple[float, ...] = (10.0,)
    """Posture stiffness per joint [Nm/rad] (one value = all joints) towards the reference posture."""
    nullspace_damping_ratio: float = 1.0
    """ζ of the posture loop, ``d = 2 ζ sqrt(k)``; must be >= 0."""
    nullspace_damping: tuple[float, ...] | None = None
    """Explicit posture damping per joint [Nm s/rad] replacing ``2 ζ sqrt(k)`` (None: derived)."""
    nullspace_max_torque: float = 5.0
    """Clip of the projected posture torque per joint [Nm]."""
    pinv_regularization: float = 1e-6
    """Damping of the pseudo-inverse ``Jᵀ (J Jᵀ + λ I)⁻¹``."""
    gravity_compensation: bool = True
    """Add ``g(q)`` (on in simulation; off on a Franka, which compensates gravity itself)."""
    coriolis_compensation: bool = True
    """Add ``C(q, dq) dq``."""
    joint_limit_range: float = 0.1
    """Distance from a joint limit where the repulsion starts [rad]."""
    joint_limit_torque: float = 5.0
    """Repulsion torque at the limit [Nm], growing linearly across ``joint_limit_range``."""
    target_filter: float = 0.1
    """EMA weight per tick (at ``tick_hz``) for the target pose and stiffness (1 = none; CRISP 0.1)."""
    max_delta_tau: float | None = 0.5
    """Largest change of the control torque per tick at ``tick_hz`` [Nm] (CRISP 0.5 at 1 kHz); None disables."""
    tick_hz: float = 1000.0
    """Rate the per-tick constants above are given for; at another rate (e.g. a 500 Hz simulation) they
    are rescaled from the stamps so the time constant and Nm/s stay the same."""
    stop_damping: tuple[float, ...] = (5.0,)
    """Joint damping of the e-stop damping mode [Nm s/rad]."""

    def __post_init__(self) -> None:
        values = {"stiffness": self.stiffness, "max_stiffness": self.max_stiffness, "error_clip": self.error_clip,
                  "nullspace_stiffness": self.nullspace_stiffness, "stop_damping": self.stop_damping,
                  "damping": self.damping, "nullspace_damping": self.nullspace_damping}
        for name, val in values.items():
            if val is None:
                continue
            arr = np.asarray(val, dtype=np.float64)
            if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ConfigError(f"CartesianConfig.{name}: needs finite values >= 0, got {val}")
        for name in ("damping_ratio", "nullspace_damping_ratio", "nullspace_max_torque", "joint_limit_range",
                     "joint_limit_torque", "pinv_regularization", "osc_regularization"):
            val = getattr(self, name)
            if not (np.isfinite(val) and val >= 0):
                raise ConfigError(f"CartesianConfig.{name}: must be finite and >= 0 (damping must damp), got {val}")
        if self.nullspace_projector not in PROJECTORS:
            raise ConfigError(f"CartesianConfig.nullspace_projector: expected one of {PROJECTORS}, "
                              f"got {self.nullspace_projector!r}")
        if not 0 < self.target_filter <= 1:
            raise ConfigError(f"CartesianConfig.target_filter: must be in (0, 1], got {self.target_filter}")
        if self.max_delta_tau is not None and not self.max_delta_tau > 0:
            raise ConfigError(f"CartesianConfig.max_delta_tau: must be > 0, got {self.max_delta_tau}")
        if not (np.isfinite(self.tick_hz) and self.tick_hz > 0):
            raise ConfigError(f"CartesianConfig.tick_hz: must be a positive rate, got {self.tick_hz}")
        k = np.asarray(self.stiffness)
        if np.any(k[:3] > self.max_stiffness[0]) or np.any(k[3:] > self.max_stiffness[1]):
            raise ConfigError(f"CartesianConfig.stiffness: {self.stiffness} exceeds max_stiffness {self.max_stiffness}")


class CartesianImpedanceController(CompiledLaw, Controller):
    """Compliant end-effector pose tracking for a torque-controlled arm (see module docstring).

    Its memory (filtered target, stiffness, previous torque, last stamp) and current targets live in fixed
    float64 arrays updated in place, so the compiled law (:func:`robot_rl.control.kernels.compiled.cartesian_torque`,
    the default; :meth:`compute_reference` is the numpy reference it equals) and compiled physics loops
    (:meth:`kernel_args`) work on the very same state.
    """

    def __init__(self, config: CartesianConfig, embodiment: Embodiment, model: MujocoArmModel) -> None:
        n = embodiment.n_joints
        if model.n != n:
            raise ConfigError(f"CartesianImpedanceController: model has {model.n} joints, embodiment {n}")
        self.config = config
        self.embodiment = embodiment
        self.model = model
        self.effort = np.asarray(embodiment.limits.effort, dtype=np.float64)
        self.lower = np.asarray(embodiment.limits.position_lower, dtype=np.float64)
        self.upper = np.asarray(embodiment.limits.position_upper, dtype=np.float64)
        self.k_ns = per_joint("CartesianConfig.nullspace_stiffness", config.nullspace_stiffness, n)
        self.d_ns = (2.0 * config.nullspace_damping_ratio * np.sqrt(self.k_ns) if config.nullspace_damping is None
                     else per_joint("CartesianConfig.nullspace_damping", config.nullspace_damping, n))
        self._damping = np.zeros(6) if config.damping is None else np.asarray(config.damping, dtype=np.float64)
        self.stop_kd = per_joint("CartesianConfig.stop_damping", config.stop_damping, n)
        self.clip = np.repeat(np.asarray(config.error_clip, dtype=np.float64), 3)
        self.max_k = np.repeat(np.asarray(config.max_stiffness, dtype=np.float64), 3)
        self._lower_band = self.lower + config.joint_limit_range
        self._upper_band = self.upper - config.joint_limit_range
        # targets
        self._target: PoseTarget | None = None
        self._target_pos, self._target_quat = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])
        self._twist, self._has_twist = np.zeros(6), np.zeros(1, dtype=np.bool_)
        self._stiffness_target = np.asarray(config.stiffness, dtype=np.float64).copy()
        self._wrench = np.zeros(6)
        self._q_ref = np.zeros(n)
        # memory
        self._pos_f = np.zeros(3)
        self._quat_f = np.array([1.0, 0.0, 0.0, 0.0])
        self.stiffness = self._stiffness_target.copy()
        self._moving = np.ones(1, dtype=np.bool_)
        self._damp = np.zeros(6)
        self._err = np.zeros(6)
        self._tau_prev = np.zeros(n)
        self._has_prev = np.zeros(1, dtype=np.bool_)
        self._last_stamp = np.full(1, np.nan)
        nv = model.model.nv  # the compiled law's workspace: full-width Jacobians
        self._jac_full, self._jm_full, self._jac_com = np.zeros((6, nv)), np.zeros((6, nv)), np.zeros((3, nv))
        self._params: np.ndarray | None = None
        self._init_kernels()

    @property
    def last_error(self) -> np.ndarray:
        """Pose error of the last tick after clipping (translation, rotation vector), for diagnostics."""
        return self._err

    @property
    def n_commands(self) -> int:
        """One torque per arm joint."""
        return self.embodiment.n_joints

    def _prepare_kernels(self) -> None:
        self._params = self._kernel_params()

    def _kernel_params(self) -> np.ndarray:
        """The compiled law's parameter vector (its layout: the ``CP_*`` names of the kernels module)."""
        k, cfg = self._kernels, self.config
        assert k is not None
        p = np.zeros(k.CP_SIZE)
        p[k.CP_ROOT_BODY] = self.model.root_body
        p[k.CP_DAMPING_RATIO], p[k.CP_FILTER], p[k.CP_TICK_HZ] = cfg.damping_ratio, cfg.target_filter, cfg.tick_hz
        p[k.CP_OSC], p[k.CP_OSC_REG] = float(cfg.operational_space), cfg.osc_regularization
        p[k.CP_PROJECTOR], p[k.CP_PINV_REG] = k.PROJECTOR_CODES[cfg.nullspace_projector], cfg.pinv_regularization
        p[k.CP_NS_MAX], p[k.CP_JL_RANGE] = cfg.nullspace_max_torque, cfg.joint_limit_range
        p[k.CP_JL_TORQUE] = cfg.joint_limit_torque
        p[k.CP_MAX_DTAU] = -1.0 if cfg.max_delta_tau is None else cfg.max_delta_tau
        p[k.CP_GRAVITY], p[k.CP_CORIOLIS] = float(cfg.gravity_compensation), float(cfg.coriolis_compensation)
        p[k.CP_EXPLICIT_DAMPING] = float(cfg.damping is not None)
        return p

    def _current_pose(self, state: RobotState) -> PoseTarget:
        self.model.update(state)
        return PoseTarget(self.model.ee_position().copy(), mat_to_quat(self.model.ee_rotation()))

    def reset(self, state: RobotState) -> None:
        """Hold the current pose and posture; forget wrench, stiffness changes and filters."""
        self.hold(state)
        self._q_ref[:] = state.q
        self._stiffness_target[:] = self.config.stiffness
        self.stiffness[:] = self._stiffness_target
        self._moving[0] = True

    def hold(self, state: RobotState) -> None:
        """Hold the current end-effector pose (stiffness and posture reference kept)."""
        pose = self._current_pose(state)
        self._set_pose(pose)
        self._pos_f[:], self._quat_f[:] = pose.position, pose.quat
        self._wrench[:] = 0.0
        self._has_prev[0] = False
        self._last_stamp[0] = np.nan

    def _set_pose(self, target: PoseTarget) -> None:
        self._target = target
        self._target_pos[:], self._target_quat[:] = target.position, target.quat
        self._has_twist[0] = target.twist is not None
        if target.twist is not None:
            self._twist[:] = target.twist

    def current_target(self) -> PoseTarget | None:
        """The pose target (before the per-tick filter)."""
        return self._target

    def set_target(self, target: object, stamp: float) -> None:
        """Accept a PoseTarget, JointTarget (posture reference), WrenchTarget or StiffnessTarget."""
        n = self.embodiment.n_joints
        if isinstance(target, PoseTarget):
            if self._target is None:
                self._pos_f[:], self._quat_f[:] = target.position, target.quat
            self._set_pose(target)
        elif isinstance(target, JointTarget):
            if target.q.shape != (n,):
                raise TargetRejected(f"JointTarget.q: expected {n} joints, got {target.q.size}")
            if np.any((target.q < self.lower) | (target.q > self.upper)):
                raise TargetRejected("JointTarget.q: posture reference outside the joint limits")
            self._q_ref[:] = target.q
        elif isinstance(target, WrenchTarget):
            self._wrench[:3], self._wrench[3:] = target.force, target.torque
        elif isinstance(target, StiffnessTarget):
            self._stiffness_target[:] = np.minimum(target.stiffness, self.max_k)
            self._moving[0] = True
        else:
            raise TargetRejected(f"CartesianImpedanceController: unsupported target {type(target).__name__}")

    def kernel_args(self) -> tuple:
        """The arguments of the compiled law between ``q, dq`` and ``stamp, out`` (live arrays, for compiled loops)."""
        if self._params is None:
            raise RuntimeError(f"compiled kernels unavailable: {kernels.unavailable_reason()}")
        m = self.model
        return (m.site_id, m.dof_idx, m.data.site_xpos, m.data.site_xmat, m.data.qfrc_bias, m.model.body_subtreemass,
                m.model.opt.gravity, self._jac_full, self._jm_full, self._jac_com, self._params, self.k_ns, self.d_ns,
                self.effort, self._lower_band, self._upper_band, self.clip, self._damping, self._target_pos,
                self._target_quat, self._twist, self._has_twist, self._stiffness_target, self._wrench, self._q_ref,
                self._pos_f, self._quat_f, self.stiffness, self._moving, self._damp, self._err, self._tau_prev,
                self._has_prev, self._last_stamp)

    def compute(self, state: RobotState, stamp: float) -> np.ndarray:
        """Joint torques for this tick (the compiled law; :meth:`compute_reference` without kernels)."""
        if self._kernels is None:
            return self.compute_reference(state, stamp)
        if self._target is None:
            self.reset(state)
        self.model.update(state)
        out = np.empty(self.embodiment.n_joints)
        m = self.model
        self._kernels.cartesian_torque(address(m.model), address(m.data), np.ascontiguousarray(state.q),
                                       np.ascontiguousarray(state.dq), *self.kernel_args(), float(stamp), out)
        return out

    def _ticks(self, stamp: float) -> float:
        """How many ``tick_hz`` ticks this one is worth (1 when stamps do not advance)."""
        dt = 0.0 if np.isnan(self._last_stamp[0]) else stamp - float(self._last_stamp[0])
        self._last_stamp[0] = stamp
        return min(dt * self.config.tick_hz, 100.0) if dt > 0 else 1.0

    def _filter(self, ticks: float) -> None:
        a = self.config.target_filter
        if ticks != 1.0:
            a = 1.0 - (1.0 - a) ** ticks
        self._pos_f += a * (self._target_pos - self._pos_f)
        rv = np.empty(3)
        mujoco.mju_subQuat(rv, self._target_quat, self._quat_f)  # quat_f * exp(rv) = target
        mujoco.mju_quatIntegrate(self._quat_f, rv, a)
        if self._moving[0]:
            self.stiffness += a * (self._stiffness_target - self.stiffness)
            self._moving[0] = bool(np.any(np.abs(self._stiffness_target - self.stiffness) > 1e-9))
            self._damp[:] = (2.0 * self.config.damping_ratio * np.sqrt(self.stiffness) if self.config.damping is None
                             else self._damping)

    def _joint_limit_torque(self, q: np.ndarray) -> np.ndarray | float:
        rng, tmax = self.config.joint_limit_range, self.config.joint_limit_torque
        if rng <= 0 or tmax <= 0:
            return 0.0
        low, high = q - self._lower_band, self._upper_band - q  # > 0 inside the band
        if low.min() > 0 and high.min() > 0:
            return 0.0
        return tmax * (np.minimum(np.maximum(-low / rng, 0.0), 1.0) - np.minimum(np.maximum(-high / rng, 0.0), 1.0))

    @staticmethod
    def _spd_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Solve ``a x = b`` for a small symmetric positive definite ``a`` (overwritten) with MuJoCo's Cholesky."""
        mujoco.mju_cholFactor(a, 1e-12)
        x = np.empty_like(b)
        mujoco.mju_cholSolve(x, a, b)
        return x

    def compute_reference(self, state: RobotState, stamp: float) -> np.ndarray:
        """Joint torques for this tick: the readable numpy law the compiled kernel reproduces."""
        if self._target is None:
            self.reset(state)
        self.model.update(state)
        ticks = self._ticks(stamp)
        self._filter(ticks)
        cfg = self.config
        m = self.model
        e = self._err
        e[:3] = self._pos_f - m.ee_position()
        q_ee, rv = np.empty(4), np.empty(3)
        mujoco.mju_mat2Quat(q_ee, m.data.site_xmat[m.site_id])
        mujoco.mju_subQuat(rv, self._quat_f, q_ee)  # rotation error in the EE frame
        e[3:] = m.ee_rotation() @ rv  # ... expressed in the world frame
        np.minimum(e, self.clip, out=e)
        np.maximum(e, -self.clip, out=e)
        jac = m.jacobian()
        velocity = jac @ state.dq
        if self._has_twist[0]:
            velocity -= self._twist  # damp the velocity error, not the velocity
        force = self.stiffness * e - self._damp * velocity
        if cfg.operational_space or cfg.nullspace_projector == "dynamic":
            jm = m.jacobian_inverse_inertia()  # J M⁻¹
            a_inv = jm @ jac.T  # Λ⁻¹
        if cfg.operational_space:
            a = a_inv.copy()
            a.flat[::7] += cfg.osc_regularization
            force = self._spd_solve(a, force)  # Λ (K e - D J dq)
        tau = jac.T @ (force + self._wrench)
        tau0 = self.k_ns * (self._q_ref - state.q) - self.d_ns * state.dq
        if cfg.nullspace_projector == "kinematic":  # (I - J⁺J)ᵀ tau0, J⁺ = Jᵀ (J Jᵀ + λ I)⁻¹
            a = jac @ jac.T
            a.flat[::7] += cfg.pinv_regularization
            tau0 -= jac.T @ self._spd_solve(a, jac @ tau0)
        elif cfg.nullspace_projector == "dynamic":  # (I - Jᵀ J̄ᵀ) tau0, J̄ᵀ = Λ J M⁻¹
            a = a_inv
            a.flat[::7] += cfg.pinv_regularization
            tau0 -= jac.T @ self._spd_solve(a, jm @ tau0)
        lim = cfg.nullspace_max_torque
        tau += np.minimum(np.maximum(tau0, -lim), lim)
        tau += self._joint_limit_torque(state.q)
        np.minimum(tau, self.effort, out=tau)  # no wind-up of the rate limiter beyond the motors
        np.maximum(tau, -self.effort, out=tau)
        if cfg.max_delta_tau is not None and self._has_prev[0]:
            step = cfg.max_delta_tau * ticks
            np.minimum(tau, self._tau_prev + step, out=tau)
            np.maximum(tau, self._tau_prev - step, out=tau)
        self._tau_prev[:], self._has_prev[0] = tau, True
        if cfg.gravity_compensation and cfg.coriolis_compensation:
            tau = tau + m.bias()
        elif cfg.gravity_compensation:
            tau = tau + m.gravity()
        elif cfg.coriolis_compensation:
            tau = tau + m.bias() - m.gravity()
        return np.minimum(np.maximum(tau, -self.effort), self.effort)

    def safe_stop(self, state: RobotState) -> np.ndarray:
        """Damping mode with gravity compensation (when configured): the arm stops and floats."""
        tau = -self.stop_kd * state.dq
        if self.config.gravity_compensation:
            self.model.update(state)
            tau = tau + self.model.gravity()
        return np.clip(tau, -self.effort, self.effort)
