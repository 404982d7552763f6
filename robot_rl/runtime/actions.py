"""Policy actions <-> controller targets, one adapter per control mode, shared by the envs and the ROS node.

A policy trained in a simulated env emits actions in that env's units (normalised offsets, fractions of
the maximum thrust, delta poses). Driving the same policy on a ROS graph or a real robot needs the very
same mapping to a controller target, and an online learner needs its inverse (``relabel``: what action
would have produced the motion a human caused). The scaling lives here once; the envs call
:func:`joint_position_map` and :func:`thrust_body_rates`, so the node can never drift from training.

* ``cartesian_delta`` (arms, 7): ``delta_pose`` in [-1, 1]^6 integrated by
  :class:`~robot_rl.runtime.arm_actions.CartesianDeltaIntegrator` + gripper in [-1 closed, 1 open] -> PoseTarget;
* ``cartesian_pose`` (arms, 8; alias ``absolute_pose``, what the recorder node stores): position, quaternion
  wxyz, gripper opening 0..1 -> PoseTarget;
* ``joint_position``: offsets around a posture (the humanoid's crouch, x its ``joint_action_scale`` rad) for a
  robot whose description gives ``joint_action_offset``, else absolute joint targets (an arm's, + gripper in
  [-1, 1]) -> JointTarget;
* ``thrust_body_rates`` (quadrotor, 4): collective in [0, 1] of ``4 * THRUST_MAX`` and body rates / ``MAX_BODY_RATE``
  -> BodyRateTarget (thrust [N], body rates [rad/s]).
Pure core: numpy and the robot modules only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from robot_rl.control.rotations import quat_to_mat
from robot_rl.control.targets import BodyRateTarget, JointTarget, PoseTarget
from robot_rl.core import ControlMode, SpecError
from robot_rl.robots import cf2x, robot_module
from robot_rl.robots.descriptions import description
from robot_rl.runtime.arm_actions import CartesianDeltaIntegrator, workspace

MAX_BODY_RATE = 8.0
"""Quadrotor body rate at action magnitude 1 [rad/s]."""
ALIASES = {"absolute_pose": ControlMode.CARTESIAN_POSE}
"""Older action-format names still accepted."""

Observation = Mapping[str, np.ndarray]


def control_mode(name: str) -> ControlMode:
    """``name`` (a ControlMode value or an alias) as a ControlMode; SpecError lists the known ones."""
    if name in ALIASES:
        return ALIASES[name]
    try:
        return ControlMode(name)
    except ValueError:
        known = sorted([*(m.value for m in ControlMode), *ALIASES])
        raise SpecError(f"control_mode {name!r} is not one of {known}") from None


def gripper_opening(a: float) -> float:
    """Gripper action in [-1 closed, 1 open] -> opening 0..1 (the arm envs' rule)."""
    return float((np.clip(a, -1.0, 1.0) + 1.0) / 2.0)


@dataclass(frozen=True)
class JointPositionMap:
    """Joint targets = clip(offset + scale * action, low, high); ``normalised`` actions live in [-1, 1]."""

    offset: np.ndarray
    """Joint targets at action 0 [rad] (the default posture, or zeros for absolute targets)."""
    scale: float
    """Radians per action unit."""
    low: np.ndarray
    """Lower joint limits [rad]."""
    high: np.ndarray
    """Upper joint limits [rad]."""
    normalised: bool
    """Actions are clipped to [-1, 1] (offsets) rather than to the joint limits (absolute targets)."""

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")
        if not self.offset.shape == self.low.shape == self.high.shape:
            raise ValueError("offset, low and high must have one entry per joint")

    def to_q(self, action: np.ndarray) -> np.ndarray:
        """Joint targets for an action (clipped into its range, then into the joint limits)."""
        a = np.asarray(action, dtype=np.float64)
        a = np.clip(a, -1.0, 1.0) if self.normalised else a
        return np.clip(self.offset + self.scale * a, self.low, self.high)

    def to_action(self, q: np.ndarray) -> np.ndarray:
        """The action whose targets are ``q`` (inverse of :meth:`to_q` inside the ranges)."""
        a = (np.clip(np.asarray(q, dtype=np.float64), self.low, self.high) - self.offset) / self.scale
        return np.clip(a, -1.0, 1.0) if self.normalised else a


def joint_position_map(robot: str) -> JointPositionMap:
    """The ``joint_position`` action rule of a robot's envs, from its description.

    Offsets in [-1, 1] around ``joint_action_offset`` (the G1's crouch) when it gives one, else absolute joint
    targets (arms).
    """
    d = description(robot)
    lim = d.embodiment.limits
    low, high = np.array(lim.position_lower), np.array(lim.position_upper)
    if d.joint_action_offset is not None:
        return JointPositionMap(np.array(d.joint_action_offset, dtype=np.float64), d.joint_action_scale, low, high,
                                normalised=True)
    return JointPositionMap(np.zeros_like(low), 1.0, low, high, normalised=False)


def thrust_body_rates(action: np.ndarray) -> tuple[float, np.ndarray]:
    """Quadrotor action [collective 0..1, rates -1..1 (3)] -> (collective thrust [N], body rates [rad/s])."""
    a = np.asarray(action, dtype=np.float64)
    return float(np.clip(a[0], 0.0, 1.0) * 4 * cf2x.THRUST_MAX), np.clip(a[1:4], -1.0, 1.0) * MAX_BODY_RATE


@dataclass
class Command:
    """What one action asks of the controller."""

    target: PoseTarget | JointTarget | BodyRateTarget
    """The controller target."""
    gripper: float | None = None
    """Gripper opening 0 closed .. 1 open (arms with a gripper), None otherwise."""


class ActionAdapter:
    """One control mode's mapping; ``measured`` / ``before`` / ``after`` are observation dicts."""

    mode: ControlMode
    action_dim: int
    measured_keys: tuple[str, ...] = ()
    """Observation keys :meth:`to_target` and :meth:`relabel` read (besides the policy's own)."""
    relabels_human_steps = False
    """Whether a recorded human step's action is relabelled from the motion it caused (the human commands
    something else than the policy's actions, e.g. a quadrotor's position setpoints)."""

    def action_of(self, target: PoseTarget | JointTarget | BodyRateTarget) -> np.ndarray:
        """The action whose target is ``target`` (the inverse of :meth:`to_target`); SpecError if none is."""
        raise SpecError(f"{type(target).__name__} is not an action target of {self.mode.value}")

    def hold_action(self, measured: Observation) -> np.ndarray:
        """The action before any policy target: hold what the robot measures (or hover)."""
        raise SpecError(f"{self.mode.value}: no holding action")

    def to_target(self, action: np.ndarray, measured: Observation) -> Command:
        """The target for one action; :class:`~robot_rl.control.base.TargetRejected` when it cannot be one."""
        raise NotImplementedError

    def relabel(self, before: Observation, after: Observation, human_gripper: float) -> np.ndarray:
        """The action that would have moved the robot from ``before`` to ``after`` (a human's step)."""
        raise NotImplementedError


class CartesianDelta(ActionAdapter):
    """``cartesian_delta``: the arm envs' integrator, one instance per stream (it keeps the orientation)."""

    mode, action_dim, measured_keys = ControlMode.CARTESIAN_DELTA, 7, ("tcp_pos", "tcp_quat")

    def __init__(self, robot: str, rate_hz: float) -> None:
        self.integrator = CartesianDeltaIntegrator(rate_hz, workspace(robot))
        self._relabel = CartesianDeltaIntegrator(rate_hz, workspace(robot))

    def to_target(self, action: np.ndarray, measured: Observation) -> Command:
        """Measured tcp + scaled delta (workspace-clipped); the orientation target accumulates."""
        self.integrator.observe(measured["tcp_pos"], measured["tcp_quat"])
        position, quat = self.integrator.step(np.asarray(action)[:6])
        return Command(PoseTarget(position, quat), gripper_opening(action[6]))

    def relabel(self, before: Observation, after: Observation, human_gripper: float) -> np.ndarray:
        """The delta between the two measured tool poses, plus the human's gripper command."""
        delta = self._relabel.delta_between(before["tcp_pos"], before["tcp_quat"], after["tcp_pos"], after["tcp_quat"])
        return np.r_[delta, 2.0 * float(np.clip(human_gripper, 0.0, 1.0)) - 1.0].astype(np.float32)


class CartesianPose(ActionAdapter):
    """``cartesian_pose``: absolute tool pose + gripper opening, as the recorder node stores actions."""

    mode, action_dim, measured_keys = ControlMode.CARTESIAN_POSE, 8, ("tcp_pos", "tcp_quat")

    def to_target(self, action: np.ndarray, measured: Observation) -> Command:
        """The pose as it is (TargetRejected for a quaternion far from unit length)."""
        a = np.asarray(action, dtype=np.float64)
        return Command(PoseTarget(a[:3], a[3:7]), float(np.clip(a[7], 0.0, 1.0)))

    def relabel(self, before: Observation, after: Observation, human_gripper: float) -> np.ndarray:
        """The pose the tool reached, plus the human's gripper command."""
        return np.r_[after["tcp_pos"], after["tcp_quat"], float(np.clip(human_gripper, 0.0, 1.0))].astype(np.float32)


class JointPosition(ActionAdapter):
    """``joint_position``: :func:`joint_position_map` of the robot, plus the gripper for arms with one."""

    mode, measured_keys = ControlMode.JOINT_POSITION, ("joint_pos",)

    def __init__(self, robot: str) -> None:
        emb = description(robot).embodiment
        self.map, self.joints = joint_position_map(robot), emb.n_joints
        self.has_gripper = bool(emb.gripper_joints)
        self.action_dim = self.joints + int(self.has_gripper)

    def to_target(self, action: np.ndarray, measured: Observation) -> Command:
        """Joint targets by the env's rule; the gripper action as an opening."""
        a = np.asarray(action, dtype=np.float64)
        return Command(JointTarget(self.map.to_q(a[:self.joints])),
                       gripper_opening(a[self.joints]) if self.has_gripper else None)

    def action_of(self, target: PoseTarget | JointTarget | BodyRateTarget) -> np.ndarray:
        """The joint action of a joint target (a gripper, if any, open)."""
        if not isinstance(target, JointTarget):
            return super().action_of(target)
        return np.r_[self.map.to_action(target.q), [1.0] if self.has_gripper else []].astype(np.float32)

    def hold_action(self, measured: Observation) -> np.ndarray:
        """Hold the measured joint angles (a gripper, if any, open)."""
        return np.r_[self.map.to_action(measured["joint_pos"]), [1.0] if self.has_gripper else []].astype(np.float32)

    def relabel(self, before: Observation, after: Observation, human_gripper: float) -> np.ndarray:
        """The action whose targets are the joint angles reached (a PD target the robot settled at)."""
        a = self.map.to_action(after["joint_pos"])
        grip = [2.0 * float(np.clip(human_gripper, 0.0, 1.0)) - 1.0] if self.has_gripper else []
        return np.r_[a, grip].astype(np.float32)


class ThrustBodyRates(ActionAdapter):
    """``thrust_body_rates``: :func:`thrust_body_rates`; relabelled from the measured acceleration and rates."""

    mode, action_dim, measured_keys = ControlMode.THRUST_BODY_RATES, 4, ("quat", "linvel", "angvel")
    relabels_human_steps = True

    def __init__(self, rate_hz: float) -> None:
        self.rate_hz = rate_hz

    def action_of(self, target: PoseTarget | JointTarget | BodyRateTarget) -> np.ndarray:
        """Collective thrust and body rates back in the action's units (clipped into its range)."""
        if not isinstance(target, BodyRateTarget):
            return super().action_of(target)
        collective = np.clip(target.thrust / (4 * cf2x.THRUST_MAX), 0.0, 1.0)
        return np.r_[collective, np.clip(target.rates / MAX_BODY_RATE, -1.0, 1.0)].astype(np.float32)

    def hold_action(self, measured: Observation) -> np.ndarray:
        """Hover thrust, no body rates (what the motors do at rest)."""
        return cf2x.rest_action(self.mode).astype(np.float32)

    def to_target(self, action: np.ndarray, measured: Observation) -> Command:
        """Collective thrust [N] and body rates [rad/s] by the env's rule."""
        thrust, rates = thrust_body_rates(action)
        return Command(BodyRateTarget(thrust, rates))

    def relabel(self, before: Observation, after: Observation, human_gripper: float) -> np.ndarray:
        """Thrust from the mean acceleration over the step (m (a + g) along body z); rates as measured after."""
        accel = (np.asarray(after["linvel"], np.float64) - before["linvel"]) * self.rate_hz
        accel[2] += cf2x.GRAVITY
        thrust = cf2x.MASS * float(accel @ quat_to_mat(after["quat"])[:, 2])
        collective = np.clip(thrust / (4 * cf2x.THRUST_MAX), 0.0, 1.0)
        return np.r_[collective, np.clip(np.asarray(after["angvel"]) / MAX_BODY_RATE, -1.0, 1.0)].astype(np.float32)


def make_adapter(mode: str | ControlMode, robot: str, rate_hz: float) -> ActionAdapter:
    """The adapter of ``mode`` for ``robot`` at the policy rate ``rate_hz``.

    Raises:
        SpecError: for an unknown mode or one this robot's embodiment does not offer.
    """
    mode = control_mode(mode.value if isinstance(mode, ControlMode) else mode)
    emb = description(robot).embodiment
    if mode in (ControlMode.CARTESIAN_DELTA, ControlMode.CARTESIAN_POSE):
        if emb.kind != "arm":
            raise SpecError(f"control_mode {mode.value}: {robot} is not an arm")
        return CartesianDelta(robot, rate_hz) if mode == ControlMode.CARTESIAN_DELTA else CartesianPose()
    if mode not in emb.control_modes:
        raise SpecError(f"control_mode {mode.value}: {robot} offers {[m.value for m in emb.control_modes]}")
    if mode == ControlMode.JOINT_POSITION:
        return JointPosition(robot)
    if mode == ControlMode.THRUST_BODY_RATES:
        return ThrustBodyRates(rate_hz)
    raise SpecError(f"control_mode {mode.value}: no action adapter yet (joint_position, thrust_body_rates, "
                    f"cartesian_delta and cartesian_pose have one)")


__all__ = ["ALIASES", "MAX_BODY_RATE", "ActionAdapter", "CartesianDelta", "CartesianPose",
           "Command", "JointPosition", "JointPositionMap", "ThrustBodyRates", "control_mode",
           "gripper_opening", "joint_position_map", "make_adapter", "thrust_body_rates"]


class LastActionFeedback:
    """The previous action as an observation (``last_action``), as the env reports it to a policy that reads it.

    The robot's module says what that is: its ``rest_action(mode)`` before the first step, then each applied
    action clipped by its ``clip_action(mode, action)`` (the Crazyflie's). :meth:`of` gives None for a policy
    without ``last_action`` or a robot whose module has no rest action.
    """

    KEY = "last_action"

    def __init__(self, robot: str, mode: ControlMode) -> None:
        self.module, self.mode = robot_module(robot), mode

    @classmethod
    def of(cls, robot: str, mode: ControlMode, state_keys: Collection[str]) -> LastActionFeedback | None:
        """The feedback of ``robot`` when a policy with these state keys reads it, else None."""
        if cls.KEY not in state_keys or not hasattr(robot_module(robot), "rest_action"):
            return None
        return cls(robot, mode)

    def initial(self) -> np.ndarray:
        """The action before the first step: the robot's rest action."""
        return np.asarray(self.module.rest_action(self.mode), np.float32)

    def applied(self, action: np.ndarray) -> np.ndarray:
        """What the robot applied of ``action`` (clipped to its range)."""
        return np.asarray(self.module.clip_action(self.mode, np.asarray(action)), np.float32)
