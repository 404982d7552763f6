"""Joint targets by name -> Unitree LowCmd at 500 Hz, LowState -> joint and IMU state: the bridge's logic.

Pure core (no DDS, no rclpy): :class:`UnitreeBridge` is fed LowState memory images and joint targets with a
clock, and :meth:`UnitreeBridge.tick` returns the LowCmd image (CRC filled in) to send. It does what
Unitree's own low-level examples (unitree_sdk2 ``g1_ankle_swing_example``, unitree_rl_gym ``deploy_real``)
do around a policy:

* nothing is sent before the first valid LowState (the robot stays in its debug-mode damping);
* gain ramp-in: kp/kd (and feed-forward torque) rise from 0 over ``ramp_time_s``, holding the measured pose
  until targets arrive, so taking over a limp or damped robot never jerks it;
* targets are checked (29 finite positions inside the joint limits, gains and torques in range) and a bad
  one is refused with a reason while the previous command keeps holding;
* damping mode (Unitree's ``create_damping_cmd``: kp = 0, kd = ``damping_kd``, q = dq = tau = 0, motors
  enabled) on the e-stop or when a target stream that was alive stops for ``command_timeout_s``; the check
  runs every tick, so damping starts within one tick of the timeout. A new target after a stale stream
  ramps in again from the measured pose;
* link loss: no valid LowState for ``link_timeout_s`` -> mode ``link_lost``, damping is kept on the wire
  (the robot may still hear us); when states come back the bridge ramps in again from the measured pose;
* ``mode_pr`` from the config (0 = pitch/roll ankles), ``mode_machine`` echoed from the robot's LowState
  (the robot ignores commands whose ``mode_machine`` does not match its type), CRC on every command.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from robot_rl.control.base import TargetRejected
from robot_rl.control.config import load_control_config
from robot_rl.control.joint_pd import per_joint
from robot_rl.control.targets import JointTarget, as_vector
from robot_rl.control.watchdog import Watchdog
from robot_rl.core.config import ConfigError
from robot_rl.hardware import unitree_idl as idl
from robot_rl.robots.descriptions import DESCRIPTIONS, description


def unitree_robots() -> list[str]:
    """Robots the bridge drives: those whose description lists ``unitree_hg`` (joints in Unitree motor order)."""
    return sorted(name for name, d in DESCRIPTIONS.items() if "unitree_hg" in d.bridges)


class BridgeMode(str, enum.Enum):
    """What the bridge sends."""

    WAITING = "waiting"
    """No LowState yet: nothing is sent."""
    RAMPING = "ramping"
    """Gains rising from 0 towards the hold pose or the target."""
    HOLD = "hold"
    """Full gains on the pose measured when the ramp began (no target yet)."""
    ACTIVE = "active"
    """Following fresh targets."""
    DAMPING = "damping"
    """kp = 0, kd = damping: e-stop or a stale target stream."""
    LINK_LOST = "link_lost"
    """No LowState for ``link_timeout_s``; damping is still sent."""


@dataclass(frozen=True)
class UnitreeBridgeConfig:
    """Bridge behaviour (the ROS node adds the network side)."""

    robot: str = "g1"
    """Robot model: g1 (29 DoF, ``unitree_hg``). H1 speaks ``unitree_go`` and is not supported."""
    rate_hz: float = 500.0
    """LowCmd rate [Hz] (Unitree's examples: 500 Hz)."""
    command_timeout_s: float = 0.2
    """A target stream silent this long [s] -> damping mode."""
    link_timeout_s: float = 0.1
    """No valid LowState this long [s] -> link lost."""
    ramp_time_s: float = 1.0
    """Gain ramp-in time [s] at start, after damping, e-stop release or link recovery."""
    damping_kd: float = 8.0
    """Joint damping of damping mode [Nm s/rad] (unitree_rl_gym's create_damping_cmd uses 8)."""
    kp: tuple[float, ...] = ()
    """Default stiffness per joint [Nm/rad] (one value = all joints; empty = controllers/<robot>.yaml)."""
    kd: tuple[float, ...] = ()
    """Default damping per joint [Nm s/rad] (empty = controllers/<robot>.yaml)."""
    max_kp: float = 0.0
    """Largest stiffness a target may ask for [Nm/rad]; 0: ``joint.max_kp`` of controllers/<robot>.yaml."""
    max_kd: float = 50.0
    """Largest damping a target may ask for [Nm s/rad]."""
    limit_margin: float = 0.0
    """Tolerance on the joint position limits [rad] (targets beyond limit + margin are refused)."""
    mode_pr: int = idl.MODE_PR
    """``mode_pr`` sent: 0 = ankles as pitch/roll (what policies trained on URDF joints expect), 1 = A/B."""

    def __post_init__(self) -> None:
        if self.robot not in unitree_robots():
            raise ConfigError(f"robot must be one of {unitree_robots()}, got {self.robot!r} (H1 speaks unitree_go)")
        for name in ("rate_hz", "command_timeout_s", "link_timeout_s", "max_kd"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if not (self.ramp_time_s >= 0 and self.damping_kd >= 0 and self.limit_margin >= 0 and self.max_kp >= 0):
            raise ConfigError("ramp_time_s, damping_kd, limit_margin and max_kp must be >= 0")
        if self.mode_pr not in (0, 1):
            raise ConfigError(f"mode_pr must be 0 (PR) or 1 (AB), got {self.mode_pr}")


@dataclass
class LowStateReading:
    """The robot's state from one LowState, joints in embodiment order."""

    q: np.ndarray
    """Joint positions [rad]."""
    dq: np.ndarray
    """Joint velocities [rad/s]."""
    tau: np.ndarray
    """Estimated joint torques [Nm]."""
    quat: np.ndarray
    """Pelvis IMU orientation (w, x, y, z)."""
    gyro: np.ndarray
    """Pelvis angular velocity, body frame [rad/s]."""
    accel: np.ndarray
    """Pelvis specific force, body frame [m/s^2] (reads +g upwards at rest)."""
    tick: int
    """The robot's millisecond tick."""
    mode_machine: int
    """Robot type code, echoed in every LowCmd."""
    stamp: float
    """Receive time [s, the bridge's clock]."""


@dataclass(frozen=True)
class BridgeStatus:
    """Mode, why, and counters (for /diagnostics)."""

    mode: BridgeMode
    reason: str
    rejected: int
    bad_crc: int
    sent: int
    link_age_s: float
    ramp: float


class UnitreeBridge:
    """The state machine between joint targets and LowCmd (see the module docstring)."""

    def __init__(self, config: UnitreeBridgeConfig) -> None:
        self.config = config
        emb = description(config.robot).embodiment
        self.joint_names: tuple[str, ...] = tuple(emb.joint_names)
        n = self.n = len(self.joint_names)
        limits = emb.limits
        self.lower = np.asarray(limits.position_lower) - config.limit_margin
        self.upper = np.asarray(limits.position_upper) + config.limit_margin
        self.effort = np.asarray(limits.effort, dtype=np.float64)
        self.velocity = np.asarray(limits.velocity, dtype=np.float64)
        joint = load_control_config(config.robot).joint
        self.max_kp = config.max_kp or (joint.max_kp if joint is not None else 0.0)
        if not self.max_kp > 0:
            raise ConfigError(f"max_kp: none given and controllers/{config.robot}.yaml has no joint section")
        joint = joint if not (config.kp and config.kd) else None
        self.kp = per_joint("kp", config.kp or (joint.kp if joint else ()), n)
        self.kd = per_joint("kd", config.kd or (joint.kd if joint else ()), n)
        try:
            self._check_gains(self.kp, self.kd)
        except TargetRejected as exc:
            raise ConfigError(f"default gains: {exc}") from exc
        self._targets = Watchdog(config.command_timeout_s)
        self._link = Watchdog(config.link_timeout_s)
        self.reading: LowStateReading | None = None
        self._target: JointTarget | None = None
        self._hold: np.ndarray | None = None
        self._ramp_t0: float | None = None
        self._estop = ""
        self._damping = ""
        self._mode, self._reason, self._ramp = BridgeMode.WAITING, "no LowState from the robot yet", 0.0
        self.rejected = self.bad_crc = self.sent = 0
        self.last_refusal = ""
        self.last_command: idl.MotorCommands | None = None

    # --- inputs ------------------------------------------------------------------------------------------------
    def on_state(self, image: np.ndarray, now: float) -> bool:
        """Take one LowState memory image; False when it was dropped.

        Dropped: a wrong CRC (counted in ``bad_crc``) or a NaN / inf joint or IMU reading (counted in
        ``rejected``, reason in :attr:`last_refusal`), which the bridge would otherwise hold as a pose to command.
        """
        if not idl.crc_ok(image):
            self.bad_crc += 1
            return False
        m, imu, n = image["motor_state"], image["imu_state"], self.n
        fields = (m["q"][:n], m["dq"][:n], m["tau_est"][:n], imu["quaternion"], imu["gyroscope"],
                  imu["accelerometer"])
        if not all(np.all(np.isfinite(f)) for f in fields):
            return self._refuse("LowState with a NaN or infinite joint / IMU reading dropped")
        self.reading = LowStateReading(
            q=m["q"][:n].astype(np.float64), dq=m["dq"][:n].astype(np.float64),
            tau=m["tau_est"][:n].astype(np.float64), quat=imu["quaternion"].astype(np.float64),
            gyro=imu["gyroscope"].astype(np.float64), accel=imu["accelerometer"].astype(np.float64),
            tick=int(image["tick"]), mode_machine=int(image["mode_machine"]), stamp=now)
        self._link.feed(now)
        return True

    def submit(self, target: JointTarget, now: float) -> bool:
        """Check and take a target; False with the reason in :attr:`status` when it is refused."""
        try:
            self._check(target)
        except TargetRejected as exc:
            return self._refuse(str(exc))
        if self._estop:
            return self._refuse(f"e-stop engaged ({self._estop})")
        if self._damping:  # a stream that went stale and came back: ramp in again from the measured pose
            self._damping, self._ramp_t0 = "", None
        self._target = target
        self._targets.feed(now)
        return True

    def set_gains(self, kp: np.ndarray, kd: np.ndarray) -> bool:
        """New default gains for targets that carry none (latched); False with a reason when out of range."""
        try:
            kp = as_vector("kp", kp, self.n)
            kd = as_vector("kd", kd, self.n)
            self._check_gains(kp, kd)
        except (TargetRejected, ConfigError) as exc:
            return self._refuse(f"gains: {exc}")
        self.kp, self.kd = kp, kd
        return True

    def estop(self, engaged: bool, reason: str = "e-stop") -> None:
        """Latch (damping) or clear the e-stop; clearing ramps in again on the measured pose."""
        if engaged:
            self._estop = reason or "e-stop"
        elif self._estop:
            self._estop, self._damping, self._target, self._ramp_t0 = "", "", None, None
            self._targets.clear()

    # --- output ------------------------------------------------------------------------------------------------
    def tick(self, now: float) -> np.ndarray | None:
        """The LowCmd memory image to send now (CRC set), or None before the robot has spoken."""
        reading = self.reading
        if reading is None:
            return None
        if self._link.stale(now):
            self._ramp_t0 = None
            cmd = self._set(BridgeMode.LINK_LOST, f"no valid LowState for {self._link.age(now) * 1e3:.0f} ms "
                            f"(timeout {self.config.link_timeout_s * 1e3:.0f} ms); sending damping", self._damp())
        elif self._estop:
            self._ramp_t0 = None
            cmd = self._set(BridgeMode.DAMPING, f"e-stop: {self._estop}", self._damp())
        else:
            if self._target is not None and self._targets.stale(now):
                self._damping = (f"no target for {self._targets.age(now) * 1e3:.0f} ms "
                                 f"(timeout {self.config.command_timeout_s * 1e3:.0f} ms)")
                self._target, self._ramp_t0 = None, None
            cmd = self._set(BridgeMode.DAMPING, self._damping, self._damp()) if self._damping else self._follow(now)
        self.last_command = cmd
        self.sent += 1
        return idl.lowcmd_image(self.config.mode_pr, reading.mode_machine, cmd)

    @property
    def mode(self) -> BridgeMode:
        """The mode of the last tick."""
        return self._mode

    def status(self, now: float) -> BridgeStatus:
        """Mode, reason and counters now."""
        return BridgeStatus(self._mode, self._reason, self.rejected, self.bad_crc, self.sent, self._link.age(now),
                            self._ramp)

    # --- internals ---------------------------------------------------------------------------------------------
    def _follow(self, now: float) -> idl.MotorCommands:
        assert self.reading is not None
        if self._ramp_t0 is None:
            self._ramp_t0, self._hold = now, self.reading.q.copy()
        ramp = self._ramp = 1.0 if self.config.ramp_time_s == 0 else min(1.0, (now - self._ramp_t0)
                                                                            / self.config.ramp_time_s)
        target = self._target
        zeros = np.zeros(self.n)
        q = target.q if target is not None else self._hold
        dq = target.dq if target is not None and target.dq is not None else zeros
        tau = target.tau_ff if target is not None and target.tau_ff is not None else zeros
        kp = target.kp if target is not None and target.kp is not None else self.kp
        kd = target.kd if target is not None and target.kd is not None else self.kd
        if ramp < 1.0:
            mode, reason = BridgeMode.RAMPING, f"gains ramping in ({ramp:.0%})"
        elif target is None:
            mode, reason = BridgeMode.HOLD, "holding the measured pose; no target yet"
        else:
            mode, reason = BridgeMode.ACTIVE, "following targets"
        assert q is not None
        return self._set(mode, reason, self._command(q, dq, ramp * tau, ramp * kp, ramp * kd))

    def _damp(self) -> idl.MotorCommands:
        zeros = np.zeros(self.n)
        return self._command(zeros, zeros, zeros, zeros, np.full(self.n, self.config.damping_kd))

    def _command(self, q: np.ndarray, dq: np.ndarray, tau: np.ndarray, kp: np.ndarray,
                 kd: np.ndarray) -> idl.MotorCommands:
        cmd = idl.MotorCommands.zeros()
        cmd.mode[:self.n] = idl.MOTOR_ENABLE
        for dst, src in zip(cmd[1:], (q, dq, tau, kp, kd)):
            dst[:self.n] = src
        return cmd

    def _set(self, mode: BridgeMode, reason: str, cmd: idl.MotorCommands) -> idl.MotorCommands:
        self._mode, self._reason = mode, reason
        if mode in (BridgeMode.DAMPING, BridgeMode.LINK_LOST):
            self._ramp = 0.0
        return cmd

    def _refuse(self, reason: str) -> bool:
        self.rejected += 1
        self.last_refusal = reason
        return False

    def _check(self, target: JointTarget) -> None:
        if target.q.shape != (self.n,):
            raise TargetRejected(f"expected {self.n} joint positions, got {target.q.size}")
        outside = np.flatnonzero((target.q < self.lower) | (target.q > self.upper))
        if outside.size:
            raise TargetRejected("outside the joint limits: " + ", ".join(
                f"{self.joint_names[i]}={target.q[i]:.3f} not in [{self.lower[i]:.3f}, {self.upper[i]:.3f}]"
                for i in outside[:4]))
        if target.dq is not None and np.any(np.abs(target.dq) > self.velocity):
            raise TargetRejected("joint velocity beyond the velocity limits")
        if target.tau_ff is not None and np.any(np.abs(target.tau_ff) > self.effort):
            raise TargetRejected("feed-forward torque beyond the effort limits")
        if target.kp is not None or target.kd is not None:
            self._check_gains(self.kp if target.kp is None else target.kp,
                              self.kd if target.kd is None else target.kd)

    def _check_gains(self, kp: np.ndarray, kd: np.ndarray) -> None:
        if np.any(kp < 0) or np.any(kp > self.max_kp):
            raise TargetRejected(f"kp must be in [0, {self.max_kp}]")
        if np.any(kd < 0) or np.any(kd > self.config.max_kd):
            raise TargetRejected(f"kd must be in [0, {self.config.max_kd}]")
