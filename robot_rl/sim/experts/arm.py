"""Scripted experts for the Panda tasks (``cartesian_delta`` actions).

Each expert decides from the CURRENT observation only (no hidden phase counter), so it can take
over mid-episode from any state, e.g. as a simulated human intervening after a policy's mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.control.rotations import quat_to_mat, quat_yaw
from robot_rl.robots import scenes
from robot_rl.runtime.arm_actions import MAX_ANG_SPEED, MAX_LIN_SPEED
from robot_rl.sim.envs.arm_multitask import LIFT, PUSH, REACH, TASK_ID_KEY, TASKS
from robot_rl.sim.envs.arm_pick_lift import LIFT_HEIGHT

OPEN, CLOSED = 1.0, -1.0


def wrap_angle(angle: float, period: float) -> float:
    """Wrap into [-period/2, period/2): ``period`` pi/2 compares yaws of a cube, square every 90 degrees."""
    return float(np.remainder(angle + period / 2, period) - period / 2)


class _ArmExpert:
    """Shared scaling: desired tcp displacement [m] and yaw change [rad] -> action in [-1, 1]."""

    def __init__(self, policy_hz: float = 10.0, gain: float = 1.0) -> None:
        self.step_lin = MAX_LIN_SPEED / policy_hz
        self.step_ang = MAX_ANG_SPEED / policy_hz
        self.gain = gain
        self._hand_z = np.array([0.0, 0.0, -1.0])

    def _action(self, displacement: np.ndarray, dyaw: float, gripper: float) -> np.ndarray:
        lin = np.clip(self.gain * displacement / self.step_lin, -1.0, 1.0)
        # roll/pitch: bring the hand's z axis back to pointing straight down (world rotation vector)
        tilt = np.cross(self._hand_z, np.array([0.0, 0.0, -1.0]))
        ang = np.clip(np.r_[tilt[:2], dyaw] / self.step_ang, -1.0, 1.0)
        return np.r_[lin, ang, gripper].astype(np.float32)

    def _observe_hand(self, obs: Mapping[str, np.ndarray]) -> None:
        self._hand_z = quat_to_mat(obs["tcp_quat"])[:, 2]

    def _hand_yaw(self, obs: Mapping[str, np.ndarray]) -> float:
        return quat_yaw(obs["tcp_quat"])

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:  # pragma: no cover - abstract
        """The action for this observation."""
        raise NotImplementedError

    def reset(self) -> None:
        """Nothing to forget (decisions use the observation only); kept for a uniform interface."""


class ReachExpert(_ArmExpert):
    """Straight line to the goal."""

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Move the tcp toward ``goal_pos``."""
        self._observe_hand(obs)
        return self._action(obs["goal_pos"] - obs["tcp_pos"], 0.0, OPEN)


class PickLiftExpert(_ArmExpert):
    """Above the cube -> yaw aligned with a face -> descend -> close -> lift; retries after a miss."""

    GRASP_MIN, GRASP_MAX = 0.035, 2 * scenes.CUBE_HALF + 0.008
    """Finger opening that means "closed on the cube" [m]."""
    MAX_CLOSING_STEPS = 10
    """Policy steps the fingers may take to close before the grasp counts as stuck and is retried."""

    def __init__(self, policy_hz: float = 10.0, gain: float = 1.0) -> None:
        super().__init__(policy_hz, gain)
        self._closing = 0

    def reset(self) -> None:
        """Forget the closing counter (the only state; it only detects a stuck grasp)."""
        self._closing = 0

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """One step of the pick-and-lift policy."""
        self._observe_hand(obs)
        tcp, obj, goal = obs["tcp_pos"], obs["object_pos"], obs["goal_pos"]
        width = float(obs["gripper_width"][0])
        dyaw = wrap_angle(quat_yaw(obs["object_quat"]) - self._hand_yaw(obs), np.pi / 2)
        rel = obj - tcp
        holding = self.GRASP_MIN <= width <= self.GRASP_MAX and np.linalg.norm(rel) < 0.03
        if holding:
            self._closing = 0
            return self._action(np.r_[goal[:2] - obj[:2], goal[2] + 0.02 - obj[2]], 0.0, CLOSED)
        aligned_xy = np.linalg.norm(rel[:2]) < 0.01 and abs(dyaw) < 0.08
        grasp_z = max(obj[2], 0.022)
        if aligned_xy:
            if tcp[2] > grasp_z + 0.01:
                return self._action(np.r_[rel[:2], grasp_z - tcp[2]], dyaw, OPEN)
            if width > self.GRASP_MAX and self._closing < self.MAX_CLOSING_STEPS:
                self._closing += 1
                return self._action(np.r_[rel[:2], 0.0], 0.0, CLOSED)
            if width > self.GRASP_MAX:  # stuck on an edge: open and retry from above
                self._closing = 0
                return self._action(np.r_[0.0, 0.0, 0.06], 0.0, OPEN)
            if width < self.GRASP_MIN:  # closed on nothing: open and go up again
                return self._action(np.r_[0.0, 0.0, 0.05], 0.0, OPEN)
        hover_z = obj[2] + 0.08
        if np.linalg.norm(rel[:2]) > 0.02 and tcp[2] < obj[2] + 0.04:
            return self._action(np.r_[0.0, 0.0, hover_z - tcp[2]], dyaw, OPEN)  # clear the cube first
        return self._action(np.r_[rel[:2], hover_z - tcp[2]] if np.linalg.norm(rel[:2]) > 0.01
                            else np.r_[rel[:2], grasp_z - tcp[2]], dyaw, OPEN)


class PushExpert(_ArmExpert):
    """Closed fingers behind the cube (seen from the goal), then along the cube-goal line."""

    STANDOFF = scenes.CUBE_HALF + 0.025
    PUSH_Z = 0.02

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """One step of the push policy."""
        self._observe_hand(obs)
        tcp, obj, goal = obs["tcp_pos"], obs["object_pos"], obs["goal_pos"]
        to_goal = goal[:2] - obj[:2]
        dist = float(np.linalg.norm(to_goal))
        if dist < 0.01:
            return self._action(np.r_[0.0, 0.0, 0.08 - tcp[2]], 0.0, CLOSED)
        u = to_goal / dist
        normal = np.array([-u[1], u[0]])
        rel = tcp[:2] - obj[:2]
        along, across = float(rel @ u), float(rel @ normal)
        behind = along < -scenes.CUBE_HALF + 0.005 and abs(across) < 0.02
        if behind and tcp[2] < 0.04:
            target_xy = obj[:2] + u * min(dist, 0.04) - normal * across * 0.5
            return self._action(np.r_[target_xy - tcp[:2], self.PUSH_Z - tcp[2]], 0.0, CLOSED)
        start = obj[:2] - u * self.STANDOFF
        near_start = np.linalg.norm(tcp[:2] - start) < 0.015
        if near_start:
            return self._action(np.r_[start - tcp[:2], self.PUSH_Z - tcp[2]], 0.0, CLOSED)
        if tcp[2] < 0.07 and np.linalg.norm(rel) < 0.12:
            return self._action(np.r_[0.0, 0.0, 0.09 - tcp[2]], 0.0, CLOSED)  # lift over the cube
        return self._action(np.r_[start - tcp[:2], 0.09 - tcp[2]], 0.0, CLOSED)


class MultiTaskExpert:
    """ArmMultiTask: the reach, push or pick-and-lift expert of the episode's task (``task_id``), on its target.

    The env's ``object_pos`` already names the target cube; lifting aims straight up at the success height
    (ArmPickLift's goal), since the green ball is the reach and push goal, not where to lift to.
    """

    def __init__(self, policy_hz: float = 10.0, gain: float = 1.0) -> None:
        self.experts: dict[str, _ArmExpert] = {REACH: ReachExpert(policy_hz, gain), PUSH: PushExpert(policy_hz, gain),
                                               LIFT: PickLiftExpert(policy_hz, gain)}

    def reset(self) -> None:
        """Reset every task's expert (only the pick-and-lift one has state)."""
        for expert in self.experts.values():
            expert.reset()

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """One step of the episode's task's expert."""
        task = TASKS[round(float(obs[TASK_ID_KEY][0]))]
        if task.kind == LIFT:
            obj = obs["object_pos"]
            obs = {**obs, "goal_pos": np.r_[obj[:2], scenes.CUBE_HALF + LIFT_HEIGHT].astype(np.float32)}
        return self.experts[task.kind].act(obs)


def expert_for(env: gym.Env[Any, Any], gain: float = 1.0) -> Any:
    """The scripted expert / reference controller of ``env`` (arm tasks scaled to its policy rate).

    ``gain`` scales an arm expert's step toward its target (1: close the whole error in one policy step);
    other experts take only 1.

    Raises:
        ValueError: a ``gain`` other than 1 for an expert without one, or a gain outside (0, 1].
    """
    if not 0.0 < gain <= 1.0:
        raise ValueError(f"gain: must be in (0, 1], got {gain}")
    from robot_rl.sim.envs.arm_multitask import ArmMultiTaskEnv
    from robot_rl.sim.envs.arm_pick_lift import ArmPickLiftEnv
    from robot_rl.sim.envs.arm_push import ArmPushEnv
    from robot_rl.sim.envs.arm_reach import ArmReachEnv
    from robot_rl.sim.envs.humanoid_base import HumanoidEnv
    from robot_rl.sim.envs.humanoid_walk import HumanoidWalkEnv
    from robot_rl.sim.envs.quad_base import QuadEnv
    from robot_rl.sim.experts.humanoid import BalanceExpert
    from robot_rl.sim.experts.humanoid_walk import WalkingController
    from robot_rl.sim.experts.quad import HoverExpert

    base = env.unwrapped
    experts = ((ArmMultiTaskEnv, MultiTaskExpert), (ArmPickLiftEnv, PickLiftExpert), (ArmPushEnv, PushExpert),
               (ArmReachEnv, ReachExpert))
    if gain != 1.0 and not isinstance(base, tuple(cls for cls, _ in experts)):
        raise ValueError(f"gain: only the arm experts take one, not {type(base).__name__}'s")
    if isinstance(base, HumanoidWalkEnv):
        return WalkingController(policy_hz=float(base.config.policy_hz))
    if isinstance(base, HumanoidEnv):
        return BalanceExpert()
    if isinstance(base, QuadEnv):
        if base.mode.value != "thrust_body_rates":
            raise TypeError("the hover expert emits thrust_body_rates actions; make the env with that control_mode")
        return HoverExpert()
    hz = float(base.config.policy_hz)  # type: ignore[attr-defined]
    for cls, expert in experts:
        if isinstance(base, cls):
            return expert(hz, gain)
    raise TypeError(f"no scripted expert for {type(base).__name__}")
