"""The recorder's inputs for a humanoid or a quadrotor: odometry, the policy's targets, the human's command.

What a step holds is :mod:`robot_rl.teleop.recording`'s rule; this module only subscribes the topics it
needs and assembles the env's observation keys from them (the policy node's :data:`SOURCES`, so a
recorded step looks like what a policy sees on the graph):

* humanoid: ``joint_states`` + ``odom`` (nav_msgs/Odometry) -> the HumanoidWalk keys, plus ``command`` from
  ``cmd_vel`` / ``teleop/cmd_vel`` (:class:`~robot_rl.teleop.command_mux.VelocityCommandMux`); the action is
  the policy's ``target_joint``;
* quadrotor: ``odom`` -> position, quat, linvel, angvel, plus ``goal_pos`` (the human's
  ``teleop/target_pose`` while intervening, else a ``target_pose`` setpoint, else the configured goal) and
  ``goal_vel`` (the velocity command in force); the action is the policy's ``target_body_rates``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from robot_rl.control.base import TargetRejected
from robot_rl.control.targets import BodyRateTarget, JointTarget
from robot_rl.core.spaces import SpecError
from robot_rl.robots import embodiment
from robot_rl.ros.conversions import pose_from_msg
from robot_rl.ros.observation_sources import SOURCES, odometry_fields
from robot_rl.ros.odometry import ODOM_TOPIC
from robot_rl.ros.target_conversions import body_rate_target_from_msg, joint_target_from_msg
from robot_rl.ros.teleop_node import subscribe_velocity_commands
from robot_rl.teleop.command_mux import VelocityCommandMux
from robot_rl.teleop.recording import FloatingBaseSteps

HUMANOID_KEYS = ("base_quat", "base_height", "projected_gravity", "base_linvel", "base_angvel")
QUADROTOR_KEYS = ("position", "quat", "linvel", "angvel")


class FloatingBaseSampler:
    """Latest inputs of a floating-base robot; :meth:`sample` turns them into one recorded step."""

    def __init__(self, node: Node, robot: str, rate_hz: float, goal_pos: Sequence[float],
                 warn: Callable[[str], Any]) -> None:
        self.node, self.warn = node, warn
        self.rule = FloatingBaseSteps(robot, rate_hz)
        self.humanoid = self.rule.kind == "humanoid"
        self.joint_names = list(embodiment(robot).joint_names)
        self.goal_pos = np.asarray(goal_pos, np.float32)
        self.raw: dict[str, dict[str, np.ndarray]] = {}
        self.target: JointTarget | BodyRateTarget | None = None
        self.setpoints: dict[str, np.ndarray] = {}
        self.command = VelocityCommandMux()
        subscribe_velocity_commands(node, self.command)
        node.create_subscription(Odometry, ODOM_TOPIC, self._on_odometry, qos_profile_sensor_data)
        if self.humanoid:
            node.create_subscription(JointState, "target_joint", self._on_joint_target, 10)
        else:
            node.create_subscription(TwistStamped, "target_body_rates", self._on_rates_target, 10)
            for topic, source in (("target_pose", "policy"), ("teleop/target_pose", "human")):
                node.create_subscription(PoseStamped, topic, lambda m, s=source: self._on_setpoint(m, s), 10)

    @property
    def mode(self) -> str:
        """The control mode recorded actions belong to."""
        return self.rule.mode.value

    def _on_odometry(self, msg: Odometry) -> None:
        try:
            self.raw[ODOM_TOPIC] = odometry_fields(msg)
        except SpecError as exc:
            self.warn(f"skipping {ODOM_TOPIC}: {exc}")

    def _on_joint_target(self, msg: JointState) -> None:
        try:  # the controller refuses it too: the action in force stays
            self.target = joint_target_from_msg(msg, self.joint_names)
        except (TargetRejected, ValueError) as exc:
            self.warn(f"not recording target_joint: {exc}")

    def _on_rates_target(self, msg: TwistStamped) -> None:
        try:
            self.target = body_rate_target_from_msg(msg)
        except (TargetRejected, ValueError) as exc:
            self.warn(f"not recording target_body_rates: {exc}")

    def _on_setpoint(self, msg: PoseStamped, source: str) -> None:
        try:
            self.setpoints[source] = pose_from_msg(msg)[0].astype(np.float32)
        except SpecError as exc:
            self.warn(f"not recording a {source} setpoint: {exc}")

    def sample(self, joints: tuple[np.ndarray, np.ndarray] | None, human: bool,
               now: float) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
        """(observation, action in force) now, or None while an input is missing."""
        if ODOM_TOPIC not in self.raw or (self.humanoid and joints is None):
            return None
        keys = HUMANOID_KEYS if self.humanoid else QUADROTOR_KEYS
        obs = {k: np.asarray(SOURCES[k].value(self.raw), np.float32) for k in keys}
        if self.humanoid:
            assert joints is not None
            obs["joint_pos"], obs["joint_vel"] = joints[0].astype(np.float32), joints[1].astype(np.float32)
            obs["command"] = self.command.base_command(now).astype(np.float32)
        else:
            goal = self.setpoints.get("human") if human else None
            obs["goal_pos"] = goal if goal is not None else self.setpoints.get("policy", self.goal_pos)
            obs["goal_vel"] = self.command.twist(now)[:3].astype(np.float32)
        action = self.rule.hold_action(obs) if self.target is None else self.rule.action_of(self.target)
        return obs, action
