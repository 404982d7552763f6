"""Per-joint PD with feed-forward torque: Unitree low-level semantics, and joint impedance for arms.

``tau = kp (q* - q) + kd (dq* - dq) + tau_ff [+ gravity/Coriolis]``, clipped to the effort limits.
Per-joint kp/kd come from the config or, per command, from the target (as in Unitree's LowCmd).
Arms pass a :class:`~robot_rl.control.arm_model.MujocoArmModel` for gravity/Coriolis compensation;
humanoids run it bare (their policies learned to act against gravity through the PD).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.control.arm_model import MujocoArmModel
from robot_rl.control.base import Controller, RobotState, TargetRejected
from robot_rl.control.targets import JointTarget
from robot_rl.core.config import ConfigError
from robot_rl.core.embodiment import Embodiment


@dataclass(frozen=True)
class JointPDConfig:
    """Gains and limits of :class:`JointPDController` (``joint:`` section of ``controllers/<robot>.yaml``)."""

    kp: tuple[float, ...]
    """Stiffness per joint [Nm/rad], embodiment joint order (one value = the same for all joints)."""
    kd: tuple[float, ...]
    """Damping per joint [Nm s/rad]; must be >= 0 so that it really damps."""
    gravity_compensation: bool = False
    """Add ``g(q)`` from the arm model (arms in simulation; a real Franka compensates gravity itself)."""
    coriolis_compensation: bool = False
    """Add ``C(q, dq) dq`` from the arm model."""
    max_delta_tau: float | None = None
    """Largest change of the PD torque per tick at ``tick_hz`` [Nm] (None: unlimited)."""
    tick_hz: float = 1000.0
    """Rate ``max_delta_tau`` is given for; rescaled from the stamps at other rates (same Nm/s)."""
    stop_damping: tuple[float, ...] = (2.0,)
    """Joint damping used by the e-stop "damping mode" [Nm s/rad] (Unitree's damp mode)."""
    max_kp: float = 1000.0
    """Largest per-joint kp a target may request [Nm/rad]."""

    def __post_init__(self) -> None:
        for name in ("kp", "kd", "stop_damping"):
            values = np.asarray(getattr(self, name), dtype=np.float64)
            if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
                raise ConfigError(f"JointPDConfig.{name}: needs finite values >= 0, got {getattr(self, name)}")
        if self.max_delta_tau is not None and not self.max_delta_tau > 0:
            raise ConfigError(f"JointPDConfig.max_delta_tau: must be > 0, got {self.max_delta_tau}")
        if not (np.isfinite(self.tick_hz) and self.tick_hz > 0):
            raise ConfigError(f"JointPDConfig.tick_hz: must be a positive rate, got {self.tick_hz}")
        if np.any(np.asarray(self.kp) > self.max_kp):
            raise ConfigError(f"JointPDConfig.kp: exceeds max_kp {self.max_kp}")


def per_joint(name: str, values: tuple[float, ...], n: int) -> np.ndarray:
    """Broadcast a one-value tuple to ``n`` joints; any other length must equal ``n``."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 1:
        return np.full(n, float(arr[0]))
    if arr.size != n:
        raise ConfigError(f"{name}: expected 1 or {n} values, got {arr.size}")
    return arr


class JointPDController(Controller):
    """Joint PD + feed-forward torque with per-joint gains, torque limits and optional model compensation."""

    def __init__(self, config: JointPDConfig, embodiment: Embodiment, model: MujocoArmModel | None = None) -> None:
        n = embodiment.n_joints
        self.config = config
        self.embodiment = embodiment
        self.model = model
        if (config.gravity_compensation or config.coriolis_compensation) and model is None:
            raise ConfigError("JointPDConfig: gravity/Coriolis compensation needs an arm model")
        self.kp = per_joint("JointPDConfig.kp", config.kp, n)
        self.kd = per_joint("JointPDConfig.kd", config.kd, n)
        self.stop_kd = per_joint("JointPDConfig.stop_damping", config.stop_damping, n)
        self.effort = np.asarray(embodiment.limits.effort)
        self.lower = np.asarray(embodiment.limits.position_lower)
        self.upper = np.asarray(embodiment.limits.position_upper)
        self._target: JointTarget | None = None
        self._tau_prev: np.ndarray | None = None
        self._last_stamp: float | None = None

    @property
    def n_commands(self) -> int:
        """One torque per joint."""
        return self.embodiment.n_joints

    def reset(self, state: RobotState) -> None:
        """Hold ``state.q`` with the configured gains, clipped into the position limits.

        A measured joint can sit past its limit (contacts and soft limits let it); holding it there would make
        every target blended from the hold invalid, and the safety layer's blend-in would be refused.
        """
        self._target = JointTarget(np.clip(state.q, self.lower, self.upper))
        self._tau_prev = None
        self._last_stamp = None

    def set_target(self, target: object, stamp: float) -> None:
        """Accept a :class:`JointTarget` inside the joint limits with kp <= ``max_kp``."""
        if not isinstance(target, JointTarget):
            raise TargetRejected(f"JointPDController: expected a JointTarget, got {type(target).__name__}")
        n = self.embodiment.n_joints
        if target.q.shape != (n,):
            raise TargetRejected(f"JointTarget.q: expected {n} joints, got {target.q.size}")
        outside = np.flatnonzero((target.q < self.lower) | (target.q > self.upper))
        if outside.size:
            names = [self.embodiment.joint_names[i] for i in outside]
            raise TargetRejected(f"JointTarget.q: outside the position limits at {names}")
        if target.kp is not None and np.any(target.kp > self.config.max_kp):
            raise TargetRejected(f"JointTarget.kp: exceeds max_kp {self.config.max_kp}")
        self._target = target

    def current_target(self) -> JointTarget | None:
        """The target being tracked (None before :meth:`reset`)."""
        return self._target

    def _compensation(self) -> np.ndarray | float:
        if self.model is None:
            return 0.0
        if self.config.gravity_compensation and self.config.coriolis_compensation:
            return self.model.bias()
        if self.config.gravity_compensation:
            return self.model.gravity()
        if self.config.coriolis_compensation:
            return self.model.bias() - self.model.gravity()
        return 0.0

    def compute(self, state: RobotState, stamp: float) -> np.ndarray:
        """Joint torques for this tick (clipped to the effort limits)."""
        if self._target is None:
            self.reset(state)
        t = self._target
        assert t is not None
        kp = self.kp if t.kp is None else t.kp
        kd = self.kd if t.kd is None else t.kd
        dq_ref = 0.0 if t.dq is None else t.dq
        tau = kp * (t.q - state.q) + kd * (dq_ref - state.dq)
        if t.tau_ff is not None:
            tau = tau + t.tau_ff
        eff = self.effort
        tau = np.minimum(np.maximum(tau, -eff), eff)  # no wind-up of the rate limiter beyond what motors give
        dt = 0.0 if self._last_stamp is None else stamp - self._last_stamp
        self._last_stamp = stamp
        if self.config.max_delta_tau is not None and self._tau_prev is not None:
            step = self.config.max_delta_tau * (min(dt * self.config.tick_hz, 100.0) if dt > 0 else 1.0)
            tau = np.minimum(np.maximum(tau, self._tau_prev - step), self._tau_prev + step)
        self._tau_prev = tau
        if self.model is None:
            return tau
        self.model.update(state)
        return np.minimum(np.maximum(tau + self._compensation(), -eff), eff)

    def safe_stop(self, state: RobotState) -> np.ndarray:
        """Damping mode: ``-kd_stop dq`` plus gravity compensation when configured (no stiffness)."""
        tau = -self.stop_kd * state.dq
        if self.model is not None and self.config.gravity_compensation:
            self.model.update(state)
            tau = tau + self.model.gravity()
        return np.clip(tau, -self.effort, self.effort)
