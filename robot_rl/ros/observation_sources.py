"""Where each observation key of a policy comes from on the ROS graph: topic, message type, extraction.

A checkpoint names the observation keys it was trained on (its :class:`~robot_rl.policies.base.PolicySpec`);
the policy node subscribes to exactly the topics those keys need, following :data:`SOURCES`:

* arms: ``joint_states`` -> joint_pos / joint_vel / gripper_width (summed finger joints),
  ``current_pose`` -> tcp_pos / tcp_quat, ``task/object_pose`` -> object_pos / object_quat;
* floating bases: ``odom`` (nav_msgs/Odometry, :mod:`robot_rl.ros.odometry`) -> the humanoid's base_quat,
  base_height, projected_gravity, base_linvel and base_angvel (body frame, as the twist is), and the
  quadrotor's position, quat, angvel (body frame) and linvel (world frame: the twist rotated by the pose);
* ``image_<camera>`` (any image key of the spec) -> ``<camera>/image_raw`` (Image) or, with
  ``image_transport="compressed"``, ``<camera>/image_raw/compressed`` (CompressedImage); frames of another
  size or channel count are resized to the policy's (:mod:`robot_rl.ros.camera_inputs`);
* task inputs with no sensor (goal_pos, goal_vel, a walking command): constants from a parameter,
  ``"goal_pos=[0.55, 0.0, 0.15]; command=0.3 0 0"`` (:func:`parse_constants`); a constant wins over a topic;
* the walking ``command`` (vx, vy, yaw rate) follows ``cmd_vel`` (TwistStamped: linear x/y, angular z), and
  ``teleop/cmd_vel`` while the human holds the ``intervention``; a silent source commands zero, and before
  any command the constant (or zero) holds (:class:`~robot_rl.teleop.command_mux.VelocityCommandMux`);
* errors to a task input (:data:`DERIVED`): the quadrotor's goal_error = position - goal_pos and
  vel_error = linvel - goal_vel, computed from their inputs (sourced or constant) as the env does;
* ``last_action`` (the previous action, as applied: the quadrotor's, the G1's): fed back by the policy node
  itself (kept among the constants), starting from the robot's rest action as the env does at reset;
* ``gait_clock`` (a walking policy's phase clock): from the policy node's own clock, counted from its first
  tick with every input (robot_rl.sim.envs.humanoid_gait.gait_clock).

Frames and units are those of the simulated envs, so a policy sees on the graph what it saw in training.
A key with no source is a :class:`~robot_rl.core.spaces.SpecError` at start-up that names it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from robot_rl.control.rotations import quat_to_mat
from robot_rl.core.spaces import SpecError
from robot_rl.robots import embodiment
from robot_rl.ros.camera_inputs import CameraInput, camera_topic
from robot_rl.ros.conversions import joint_state_from_msg, pose_from_msg
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_from_msg
from robot_rl.ros.teleop_node import subscribe_velocity_commands
from robot_rl.teleop.command_mux import VelocityCommandMux, command_default

Fields = dict[str, np.ndarray]
Raw = Mapping[str, Fields]
"""Topic -> the fields parsed from its latest message."""


@dataclass(frozen=True)
class Source:
    """One observation key: the topics it needs and how its value follows from their latest fields."""

    topics: tuple[str, ...]
    """Topics (keys of :data:`TOPICS`) whose messages are needed."""
    value: Callable[[Raw], np.ndarray]
    """Latest parsed fields per topic -> the observation value."""


def _pose(msg: PoseStamped) -> Fields:
    position, quat = pose_from_msg(msg)
    return {"position": position, "quat": quat}


def odometry_fields(msg: Odometry) -> Fields:
    """An Odometry's fields: position, quat (odom frame), linear and angular velocity (body frame)."""
    position, quat, linear, angular = odometry_from_msg(msg)
    return {"position": position, "quat": quat, "linear": linear, "angular": angular}


def _gravity_in_body(raw: Raw) -> np.ndarray:
    return quat_to_mat(raw[ODOM_TOPIC]["quat"]).T @ np.array([0.0, 0.0, -1.0])


def _world_linvel(raw: Raw) -> np.ndarray:
    return quat_to_mat(raw[ODOM_TOPIC]["quat"]) @ raw[ODOM_TOPIC]["linear"]


def _field(topic: str, name: str, part: slice | None = None) -> Source:
    if part is None:
        return Source((topic,), lambda raw: raw[topic][name])
    return Source((topic,), lambda raw: raw[topic][name][part])


TOPICS: dict[str, Any] = {"joint_states": JointState, "current_pose": PoseStamped, "task/object_pose": PoseStamped,
                          ODOM_TOPIC: Odometry}
"""Topic -> message type of every state topic a source reads (images: ``<camera>/image_raw``, Image)."""
SOURCES: dict[str, Source] = {
    "joint_pos": _field("joint_states", "position"),
    "joint_vel": _field("joint_states", "velocity"),
    "gripper_width": _field("joint_states", "gripper_width"),
    "tcp_pos": _field("current_pose", "position"),
    "tcp_quat": _field("current_pose", "quat"),
    "object_pos": _field("task/object_pose", "position"),
    "object_quat": _field("task/object_pose", "quat"),
    "base_quat": _field(ODOM_TOPIC, "quat"),
    "base_height": _field(ODOM_TOPIC, "position", slice(2, 3)),
    "projected_gravity": Source((ODOM_TOPIC,), _gravity_in_body),
    "base_linvel": _field(ODOM_TOPIC, "linear"),
    "base_angvel": _field(ODOM_TOPIC, "angular"),
    "position": _field(ODOM_TOPIC, "position"),
    "quat": _field(ODOM_TOPIC, "quat"),
    "linvel": Source((ODOM_TOPIC,), _world_linvel),
    "angvel": _field(ODOM_TOPIC, "angular"),
}
"""Observation key -> its source (the envs' keys: arm, humanoid, quadrotor)."""

DERIVED: dict[str, tuple[tuple[str, str], Callable[[Fields], np.ndarray]]] = {
    "goal_error": (("position", "goal_pos"), lambda o: o["position"] - o["goal_pos"]),
    "vel_error": (("linvel", "goal_vel"), lambda o: o["linvel"] - o["goal_vel"]),
}
"""Observation key -> the keys it is computed from and how (the envs' relative errors)."""

_ENTRY = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*=\s*\[?([^\]]*)\]?\s*$")


def parse_constants(text: str) -> dict[str, np.ndarray]:
    """``"key=v1, v2, v3; key2=v1 v2"`` (brackets optional) -> key -> float32 vector.

    Raises:
        ValueError: for an entry that is not ``key=numbers``, a repeated key or a non-finite value.
    """
    out: dict[str, np.ndarray] = {}
    for entry in filter(str.strip, text.split(";")):
        match = _ENTRY.match(entry)
        if match is None:
            raise ValueError(f"constants: {entry.strip()!r} is not key=numbers")
        key, values = match.group(1), [v for v in re.split(r"[,\s]+", match.group(2)) if v]
        try:
            arr = np.array([float(v) for v in values], dtype=np.float32)
        except ValueError:
            raise ValueError(f"constants: {key} has a value that is not a number ({match.group(2)!r})") from None
        if key in out or arr.size == 0 or not np.all(np.isfinite(arr)):
            raise ValueError(f"constants: {key} is repeated, empty or not finite")
        out[key] = arr
    return out


class ObservationSources:
    """Subscribes the topics that ``keys`` need on ``node``; :meth:`observation` assembles the latest values."""

    def __init__(self, node: Node, keys: Sequence[str], robot: str, image_shapes: Mapping[str, tuple[int, int, int]],
                 constants: Mapping[str, np.ndarray], image_transport: str = "raw",
                 camera_timeout_s: float = 1.0) -> None:
        self.node = node
        self.camera_timeout_s = camera_timeout_s
        self.keys = list(dict.fromkeys(keys))
        self.derived = [k for k in self.keys if k in DERIVED and k not in constants]
        inputs = [i for k in self.derived for i in DERIVED[k][0]]
        needed = list(dict.fromkeys([k for k in self.keys if k not in self.derived] + inputs))
        self.constants = {k: np.asarray(v, np.float32) for k, v in constants.items() if k in needed}
        self.command: VelocityCommandMux | None = None
        if "command" in needed:  # refreshed from the velocity topics at every observation
            self.command = VelocityCommandMux(command_default(self.constants.get("command")))
            self.constants["command"] = np.zeros(3, np.float32)
            subscribe_velocity_commands(node, self.command)
        missing = [k for k in needed if k not in self.constants and k not in SOURCES and k not in image_shapes]
        if missing:
            raise SpecError(f"no source for observation key(s) {missing} on this graph: known topics give "
                            f"{sorted(SOURCES)} and image_<camera>; give task inputs as constants")
        emb = embodiment(robot)
        self.joints, self.grippers = list(emb.joint_names), list(emb.gripper_joints)
        self.image_shapes = dict(image_shapes)
        self.raw: dict[str, Fields] = {}
        self.sourced = [k for k in needed if k not in self.constants and k in SOURCES]
        self.topics = sorted({t for k in self.sourced for t in SOURCES[k].topics})
        parsers: dict[str, Callable[[Any], Fields]] = {"joint_states": self._joints, "current_pose": _pose,
                                                       "task/object_pose": _pose, ODOM_TOPIC: odometry_fields}
        for topic in self.topics:
            node.create_subscription(TOPICS[topic], topic, lambda m, t=topic: self._on_msg(m, t, parsers[t]),
                                     qos_profile_sensor_data)
        self.cameras = [k for k in needed if k not in self.constants and k not in SOURCES]  # image keys
        warn = lambda text: node.get_logger().warning(text, throttle_duration_sec=1.0)  # noqa: E731
        self.camera_inputs = {k: CameraInput(node, camera_topic(k.removeprefix("image_"), image_transport),
                                             self.image_shapes[k], warn) for k in self.cameras}

    def _joints(self, msg: JointState) -> Fields:
        _, q, dq, _ = joint_state_from_msg(msg, self.joints)
        grip = joint_state_from_msg(msg, self.grippers)[1] if self.grippers else np.zeros(1)
        # a missing velocity (NaN) reads as zero; an infinite one stays infinite and is refused in _on_msg
        return {"position": q, "velocity": np.where(np.isnan(dq), 0.0, dq), "gripper_width": np.array([np.sum(grip)])}

    def _on_msg(self, msg: Any, topic: str, parse: Callable[[Any], Fields]) -> None:
        try:
            fields = parse(msg)
            with np.errstate(over="ignore"):  # the policy sees float32: 1e39 would reach it as inf
                bad = [k for k, v in fields.items() if not np.all(np.isfinite(np.asarray(v, np.float32)))]
            if bad:
                raise SpecError(f"{', '.join(bad)}: not finite in float32 (beyond +-3.4e38, inf or NaN)")
            self.raw[topic] = fields
        except SpecError as exc:
            self.node.get_logger().warning(f"skipping {topic}: {exc}", throttle_duration_sec=1.0)

    def waiting_for(self) -> list[str]:
        """Topics (and cameras) that have not delivered a message yet."""
        waiting = [t for t in self.topics if t not in self.raw]
        return waiting + [k for k in self.cameras if self.camera_inputs[k].frame is None]

    def stale_cameras(self) -> dict[str, float]:
        """Cameras whose last frame arrived more than ``camera_timeout_s`` ago, with that age [s]."""
        now = time.monotonic()
        ages = {k: now - c.received for k in self.cameras if (c := self.camera_inputs[k]).received is not None}
        return {k: age for k, age in ages.items() if age > self.camera_timeout_s}

    def observation(self) -> dict[str, np.ndarray] | None:
        """Every key's latest value (float32 states, uint8 images), or None while an input is missing.

        A camera silent for over ``camera_timeout_s`` counts as missing: its last frame is a stale view.
        """
        if self.waiting_for() or self.stale_cameras():
            return None
        obs = {k: np.asarray(SOURCES[k].value(self.raw), dtype=np.float32) for k in self.sourced}
        obs.update({k: v.copy() for k, v in self.constants.items()})
        if self.command is not None:
            now = self.node.get_clock().now().nanoseconds * 1e-9
            obs["command"] = self.command.base_command(now).astype(np.float32)
        obs.update({k: frame for k in self.cameras if (frame := self.camera_inputs[k].frame) is not None})
        obs.update({k: DERIVED[k][1](obs).astype(np.float32) for k in self.derived})
        return {k: obs[k] for k in self.keys}
