"""Safety layer shared by every robot: wraps any :class:`Controller` and decides what reaches the motors.

Modes: ``hold`` (holding the current pose: after reset, a stale target, a velocity limit or a
released override), ``blending`` (a new policy took over: its target is ramped in from the held
one), ``active`` (following the policy), ``override`` (a human source; policy targets are refused
until released) and ``estop`` (latched; the inner controller's damping mode / motors off until
:meth:`SafetyLayer.clear_estop`). Every refusal and transition records a reason in
:attr:`SafetyLayer.status`, which a ROS node can publish as diagnostics.
"""

from __future__ import annotations

import enum
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np

from robot_rl.control.base import Controller, RobotState, TargetRejected
from robot_rl.control.targets import BodyRateTarget, FlightTarget, JointTarget, PoseTarget, WrenchTarget
from robot_rl.control.watchdog import Watchdog, WorkspaceBox, check_pose_target
from robot_rl.core.config import ConfigError
from robot_rl.core.embodiment import Embodiment

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """Run a SafetyLayer method under its lock (a ROS node sets targets and computes on different threads)."""
    @functools.wraps(method)
    def wrapper(self: SafetyLayer, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return cast(F, wrapper)


class SafetyMode(str, enum.Enum):
    """What the safety layer lets through."""

    HOLD = "hold"
    BLENDING = "blending"
    ACTIVE = "active"
    OVERRIDE = "override"
    ESTOP = "estop"


@dataclass(frozen=True)
class SafetyConfig:
    """Limits and timings of :class:`SafetyLayer` (``safety:`` section of ``controllers/<robot>.yaml``)."""

    watchdog_timeout: float = 0.5
    """No fresh target for this long [s] -> hold the current pose (quadrotor: hover, then land)."""
    blend_time: float = 1.0
    """Ramp from the held target to a new policy's target [s] (0: jump)."""
    workspace_low: tuple[float, float, float] | None = None
    """Lower corner of the allowed end-effector / vehicle position box [m] (None: unbounded).

    Targets outside are refused (or clipped); a floating base (quadrotor) found outside is held."""
    workspace_high: tuple[float, float, float] | None = None
    """Upper corner of the box [m]."""
    workspace_clip: bool = False
    """Clip target positions into the box instead of refusing them (SERL-style bounding box)."""
    velocity_limit_scale: float = 1.0
    """Hold when a joint moves faster than this fraction of its velocity limit."""
    max_wrench: tuple[float, float] = (40.0, 10.0)
    """Largest feed-forward force [N] and torque [Nm] a WrenchTarget may ask for."""

    def __post_init__(self) -> None:
        for name in ("watchdog_timeout", "velocity_limit_scale"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"SafetyConfig.{name}: must be > 0")
        if not self.blend_time >= 0:
            raise ConfigError("SafetyConfig.blend_time: must be >= 0")
        if (self.workspace_low is None) != (self.workspace_high is None):
            raise ConfigError("SafetyConfig.workspace_low/high: give both corners or neither")
        try:
            self.workspace  # noqa: B018 - validates the corners
        except ConfigError as exc:
            raise ConfigError(f"SafetyConfig.workspace_low/high: {exc}") from exc

    @property
    def workspace(self) -> WorkspaceBox | None:
        """The workspace box, or None when unbounded."""
        if self.workspace_low is None or self.workspace_high is None:
            return None
        return WorkspaceBox(self.workspace_low, self.workspace_high)


@dataclass
class SafetyStatus:
    """What the layer is doing and why (for diagnostics)."""

    mode: SafetyMode = SafetyMode.HOLD
    """Current mode."""
    reason: str = "not started"
    """Why the last transition or refusal happened."""
    since: float = 0.0
    """Stamp at which the current mode began [s]."""
    rejected: int = 0
    """Targets refused so far."""
    blend: float = 0.0
    """Progress of the blend-in ramp (0..1)."""
    history: list[tuple[float, str, str]] = field(default_factory=list)
    """Last transitions and refusals as (stamp, mode, reason), newest last (bounded)."""

    def to_diagnostics(self) -> dict[str, str]:
        """Flat key/value strings, as a ROS ``diagnostic_msgs/KeyValue`` list wants them."""
        return {"mode": self.mode.value, "reason": self.reason, "since": f"{self.since:.6f}",
                "rejected": str(self.rejected), "blend": f"{self.blend:.3f}"}


class SafetyLayer(Controller):
    """Wraps a controller with limits, a stale-target watchdog, blend-in, human override and e-stop."""

    HISTORY = 50

    def __init__(self, inner: Controller, config: SafetyConfig, embodiment: Embodiment) -> None:
        self.inner = inner
        self.config = config
        self.embodiment = embodiment
        self.status = SafetyStatus()
        self._effort = np.asarray(embodiment.limits.effort) if embodiment.n_joints else None
        self._vel_limit = np.asarray(embodiment.limits.velocity) * config.velocity_limit_scale
        self._box = config.workspace
        self.watchdog = Watchdog(config.watchdog_timeout)
        """Fed by every accepted primary (or human) target; stale -> hold."""
        self._blend_from: object | None = None
        self._blend_to: object | None = None
        self._blend_start = 0.0
        self._lock = threading.RLock()

    @property
    def n_commands(self) -> int:
        """Same as the wrapped controller."""
        return self.inner.n_commands

    @property
    def mode(self) -> SafetyMode:
        """Current mode."""
        return self.status.mode

    def _enter(self, mode: SafetyMode, stamp: float, reason: str) -> None:
        self.status.mode, self.status.since, self.status.reason = mode, stamp, reason
        self._log(stamp, reason)

    def _log(self, stamp: float, reason: str) -> None:
        self.status.history.append((stamp, self.status.mode.value, reason))
        del self.status.history[:-self.HISTORY]

    def _hold(self, state: RobotState, stamp: float, reason: str) -> None:
        self.inner.hold(state)
        self._blend_to = None
        self._enter(SafetyMode.HOLD, stamp, reason)

    # --- lifecycle -------------------------------------------------------------------------------------------
    @_locked
    def reset(self, state: RobotState) -> None:
        """Hold the current posture; clears blend and override but NOT a latched e-stop."""
        self.inner.reset(state)
        self._blend_to = None
        if self.status.mode != SafetyMode.ESTOP:
            self._enter(SafetyMode.HOLD, state.stamp, "reset: holding the current pose")

    @_locked
    def warm_up(self, state: RobotState) -> None:
        """Warm the inner law (see :meth:`Controller.warm_up`), then :meth:`reset` (hold ``state``)."""
        self.inner.warm_up(state)
        self.reset(state)

    @_locked
    def estop(self, stamp: float, reason: str = "e-stop requested") -> None:
        """Latch the e-stop: commands become the inner controller's damping mode / motors off."""
        self._enter(SafetyMode.ESTOP, stamp, reason)

    @_locked
    def clear_estop(self, state: RobotState) -> None:
        """Leave the e-stop explicitly; the robot then holds where it is."""
        if self.status.mode == SafetyMode.ESTOP:
            self.inner.reset(state)
            self._enter(SafetyMode.HOLD, state.stamp, "e-stop cleared: holding the current pose")

    @_locked
    def engage_override(self, stamp: float, reason: str = "human override") -> None:
        """A human takes over: from now on only ``source="human"`` targets are followed."""
        if self.status.mode != SafetyMode.ESTOP:
            self._blend_to = None
            self.watchdog.feed(stamp)
            self._enter(SafetyMode.OVERRIDE, stamp, reason)

    @_locked
    def release_override(self, state: RobotState) -> None:
        """The human lets go: hold here; the next policy target blends in."""
        if self.status.mode == SafetyMode.OVERRIDE:
            self._hold(state, state.stamp, "override released: holding the current pose")

    # --- targets ---------------------------------------------------------------------------------------------
    def _check(self, target: object) -> object:
        cfg = self.config
        if isinstance(target, (PoseTarget, FlightTarget)):
            target = check_pose_target(target, self._box, cfg.workspace_clip)
        if isinstance(target, WrenchTarget) and (np.linalg.norm(target.force) > cfg.max_wrench[0]
                                                 or np.linalg.norm(target.torque) > cfg.max_wrench[1]):
            raise TargetRejected(f"WrenchTarget: exceeds max_wrench {cfg.max_wrench}")
        return target

    def submit(self, target: object, stamp: float, source: str = "policy") -> bool:
        """:meth:`set_target` that reports refusals in :attr:`status` and returns False instead of raising."""
        try:
            self.set_target(target, stamp, source)
        except TargetRejected:
            return False  # the reason is in status
        return True

    @_locked
    def set_target(self, target: object, stamp: float, source: str = "policy") -> None:
        """Validate and apply a target from ``source`` (``policy`` or ``human``).

        Raises:
            TargetRejected: with the reason (also stored in :attr:`status`); the robot keeps holding.
        """
        try:
            self._set_target(target, stamp, source)
        except TargetRejected as exc:
            self.status.rejected += 1
            self.status.reason = f"rejected {source} target: {exc}"
            self._log(stamp, self.status.reason)
            raise

    def _set_target(self, target: object, stamp: float, source: str) -> None:
        mode = self.status.mode
        if source not in ("policy", "human"):
            raise TargetRejected(f"unknown target source {source!r}")
        if mode == SafetyMode.ESTOP:
            raise TargetRejected("e-stop engaged")
        if source == "policy" and mode == SafetyMode.OVERRIDE:
            raise TargetRejected("human override active")
        if source == "human" and mode != SafetyMode.OVERRIDE:
            raise TargetRejected("human targets need engage_override() first")
        target = self._check(target)
        held = self.inner.current_target()
        # The primary target (the one the inner controller holds) is blended; secondary ones
        # (wrench, stiffness, a Cartesian controller's posture reference) apply at once.
        primary = isinstance(target, (PoseTarget, JointTarget, FlightTarget, BodyRateTarget))
        blendable = primary and type(held) is type(target)
        self.inner.set_target(target, stamp)  # validates (limits, shapes); raises before anything changes
        if not primary or source == "human":
            if source == "human":
                self.watchdog.feed(stamp)
            return
        self.watchdog.feed(stamp)
        if mode == SafetyMode.HOLD and self.config.blend_time > 0 and blendable:
            self._blend_from, self._blend_start = held, stamp
            self._enter(SafetyMode.BLENDING, stamp, f"new {source} target: blending in over "
                                                    f"{self.config.blend_time} s")
        elif mode == SafetyMode.HOLD:
            self._enter(SafetyMode.ACTIVE, stamp, f"new {source} target")
        if self.status.mode == SafetyMode.BLENDING:
            if type(target) is type(self._blend_from):
                self._blend_to = target
                self._apply_blend(stamp)
            else:  # e.g. hover setpoint -> body rates: nothing to interpolate between
                self._blend_to = None
                self._enter(SafetyMode.ACTIVE, stamp, f"new {type(target).__name__}: blend-in skipped")

    def _apply_blend(self, stamp: float) -> None:
        alpha = min(1.0, max(0.0, (stamp - self._blend_start) / self.config.blend_time))
        self.status.blend = alpha
        start, goal = self._blend_from, self._blend_to
        if alpha >= 1.0 or goal is None or not hasattr(start, "blend"):
            self.inner.set_target(goal, stamp)
            self._enter(SafetyMode.ACTIVE, stamp, "blend-in complete")
            return
        self.inner.set_target(start.blend(goal, alpha), stamp)

    def current_target(self) -> object | None:
        """The inner controller's target."""
        return self.inner.current_target()

    # --- control tick ----------------------------------------------------------------------------------------
    @_locked
    def compute(self, state: RobotState, stamp: float) -> np.ndarray:
        """Commands for this tick after the watchdog, velocity check, blend-in and limits."""
        if not (state.is_finite() and np.isfinite(stamp)):
            if self.status.mode != SafetyMode.ESTOP:
                self.estop(stamp, "non-finite robot state or stamp (sensor fault)")
            return np.zeros(self.n_commands)
        mode = self.status.mode
        if mode == SafetyMode.ESTOP:
            return self._finite(self.inner.safe_stop(state))
        if mode in (SafetyMode.ACTIVE, SafetyMode.BLENDING, SafetyMode.OVERRIDE):
            if self.watchdog.stale(stamp):
                self._hold(state, stamp, f"stale target: none for {self.watchdog.age(stamp):.3f} s (timeout "
                                         f"{self.config.watchdog_timeout} s)")
            elif state.base_pos is not None and self._box is not None and not self._box.contains(state.base_pos):
                self._hold(state, stamp, f"left the workspace box at {np.round(state.base_pos, 3).tolist()}")
            elif state.dq.size and np.any(np.abs(state.dq) > self._vel_limit):
                j = int(np.argmax(np.abs(state.dq) / self._vel_limit))
                self._hold(state, stamp, f"velocity limit: {self.embodiment.joint_names[j]} at "
                                         f"{abs(state.dq[j]):.2f} rad/s > {self._vel_limit[j]:.2f}")
            elif mode == SafetyMode.BLENDING:
                self._apply_blend(stamp)
        cmd = self.inner.compute(state, stamp)
        if not np.all(np.isfinite(cmd)):
            self.estop(stamp, "controller produced a non-finite command")
            return self._finite(self.inner.safe_stop(state))
        return self._limit(cmd)

    def _limit(self, cmd: np.ndarray) -> np.ndarray:
        if self._effort is not None and cmd.shape == self._effort.shape:
            return np.clip(cmd, -self._effort, self._effort)
        return cmd

    def _finite(self, cmd: np.ndarray) -> np.ndarray:
        return self._limit(np.where(np.isfinite(cmd), cmd, 0.0))

    def safe_stop(self, state: RobotState) -> np.ndarray:
        """The inner controller's e-stop commands."""
        return self._finite(self.inner.safe_stop(state))

    @_locked
    def hold(self, state: RobotState) -> None:
        """Hold the current pose (mode ``hold``)."""
        self._hold(state, state.stamp, "hold requested")
