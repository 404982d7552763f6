"""Recorder node: writes episodes from the graph's topics into a crash-safe episode store.

At ``rate_hz`` it samples the latest ``joint_states`` (joint positions and velocities, gripper opening, and
``qpos``/``qvel``: arm and finger joints in MuJoCo's order, what ``robot-rl align`` replays from),
``current_pose`` (tool pose, arms) and camera images (``cameras``: Image or CompressedImage topics, resized to
``image_width`` x ``image_height``) into an observation, and records as the action the target in force:
``teleop/target_pose`` + ``teleop/gripper`` while the latched ``intervention`` flag is true (steps marked as
human interventions), else ``target_pose`` + ``target_gripper`` from the policy; before any target it records
holding the current pose. The action is an absolute tool target ``[x, y, z, qw, qx, qy, qz, gripper]`` in the
base frame. ``episode_event`` (String) ends episodes: success / failure commit, rerecord discards the take,
stop commits and pauses recording until ``~/start``. A crash loses at most the open episode; earlier ones stay
readable. ``recorder/status`` (latched String) says whether an episode is open, how many are stored and which
``intervention`` state the recorder has heard ("intervention not heard" until a teleop node's flag arrives), so an
operator, or a test, knows the human's takeover will be recorded before making one.

A humanoid or a quadrotor (no tool pose) is recorded by :mod:`robot_rl.ros.floating_base_recording`: the env's
odometry keys, the walking ``command`` / the flight setpoint the human set, and the policy's action in its
own control mode (joint_position / thrust_body_rates), a quadrotor's human steps relabelled from the motion
(:mod:`robot_rl.teleop.recording` says what a learner gets).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import Trigger

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.data.stream_recorder import StreamRecorder
from robot_rl.robots import embodiment
from robot_rl.ros.camera_inputs import CameraInput
from robot_rl.ros.conversions import joint_state_from_msg, pose_from_msg
from robot_rl.ros.floating_base_recording import FloatingBaseSampler
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import EVENTS, LATCHED, RateLimitedWarnings
from robot_rl.teleop.recording import RelabellingRecorder


@dataclass(frozen=True)
class RecorderNodeConfig:
    """Recorder node parameters."""

    dataset: str = "robot_rl_demos.zarr"
    """Episode store to append to (created when missing)."""
    robot: str = "panda"
    """Robot name (joint names, metadata)."""
    rate_hz: float = 10.0
    """Sampling rate = the dataset's fps; match the policy rate."""
    task: str = ""
    """Task text stored with the episodes."""
    cameras: tuple[str, ...] = ()
    """Image topics to record; the observation key is the topic's first segment (front/image_raw -> front).
    A topic ending in ``/compressed`` is read as a CompressedImage (JPEG/PNG), any other as an Image."""
    image_width: int = 0
    """Width frames are stored at [px] (resized); 0 keeps the first frame's size."""
    image_height: int = 0
    """Height frames are stored at [px] (resized); 0 keeps the first frame's size."""
    max_steps: int = 3000
    """Episodes longer than this are cut (committed as truncated)."""
    goal_pos: tuple[float, ...] = (0.0, 0.0, 1.0)
    """Quadrotor: the goal_pos recorded while no setpoint is in force (the policy node's goal_pos constant)."""

    def __post_init__(self) -> None:
        if not 0 < self.rate_hz <= 200:
            raise ValueError(f"rate_hz must be in (0, 200], got {self.rate_hz}")
        if self.max_steps < 2:
            raise ValueError(f"max_steps must be >= 2, got {self.max_steps}")
        if self.image_width < 0 or self.image_height < 0 or (self.image_width == 0) != (self.image_height == 0):
            raise ValueError(f"image_width and image_height must both be 0 or both positive, "
                             f"got {self.image_width}x{self.image_height}")


class RecorderNode(Node):
    """Samples the graph at a fixed rate and appends episodes to the store."""

    def __init__(self) -> None:
        super().__init__("recorder")
        cfg = self.config = declare_config(self, RecorderNodeConfig)
        emb = embodiment(cfg.robot)
        self.joints, self.gripper_joints = list(emb.joint_names), list(emb.gripper_joints)
        path = Path(cfg.dataset).expanduser()
        self._warn = RateLimitedWarnings(self.get_logger())
        self.floating = (None if emb.kind == "arm" else
                         FloatingBaseSampler(self, cfg.robot, cfg.rate_hz, cfg.goal_pos, self._warn))
        self.record_qstate = self.floating is None
        if path.exists():
            self.store = EpisodeStore.open(path, mode="a")
            self.record_qstate &= "observation.qpos" in self.store.column_names()  # a store keeps its columns
        else:
            # the recorded action is the absolute tool target in force: a cartesian_pose policy trains on it
            self.store = EpisodeStore.create(path, DatasetInfo(robot=cfg.robot, fps=cfg.rate_hz, task=cfg.task,
                                                               controller={"control_mode": self.floating.mode
                                                                           if self.floating else "cartesian_pose"},
                                                               source="ros:recorder_node"))
        self.recorder = RelabellingRecorder(StreamRecorder(self.store, task=cfg.task or None, max_steps=cfg.max_steps),
                                            None if self.floating is None else self.floating.rule)
        self.active = True
        self.human = False
        self.human_heard = False
        """Whether the latched intervention flag has arrived (DDS discovery can take seconds on a loaded machine)."""
        self.joint: tuple[np.ndarray, np.ndarray, float] | None = None
        self.qstate: tuple[np.ndarray, np.ndarray] | None = None
        self.pose: tuple[np.ndarray, np.ndarray] | None = None
        self.targets: dict[str, tuple[np.ndarray, np.ndarray] | None] = {"policy": None, "human": None}
        self.grippers = {"policy": 1.0, "human": 1.0}
        self.create_subscription(JointState, "joint_states", self._on_joints, qos_profile_sensor_data)
        self.create_subscription(PoseStamped, "current_pose", self._on_pose, qos_profile_sensor_data)
        self.create_subscription(PoseStamped, "target_pose", lambda m: self._on_target(m, "policy"), 10)
        self.create_subscription(PoseStamped, "teleop/target_pose", lambda m: self._on_target(m, "human"), 10)
        self.create_subscription(Float64, "target_gripper", lambda m: self._on_gripper(m, "policy"), 10)
        self.create_subscription(Float64, "teleop/gripper", lambda m: self._on_gripper(m, "human"), 10)
        self.create_subscription(Bool, "intervention", self._on_intervention, LATCHED)
        self.create_subscription(String, "episode_event", self._on_event, EVENTS)
        shape = (cfg.image_height, cfg.image_width, 3) if cfg.image_width else None
        self.cameras = {topic.strip("/").split("/")[0]: CameraInput(self, topic, shape, self._warn)
                        for topic in cfg.cameras}  # a camera's first frame fixes its size: columns keep their shape
        self.pub_status = self.create_publisher(String, "recorder/status", LATCHED)
        self.create_service(Trigger, "~/start", self._on_start)
        self.create_timer(1.0 / cfg.rate_hz, self._tick)
        self.get_logger().info(f"recording {cfg.robot} at {cfg.rate_hz:g} Hz into {path} "
                               f"({self.store.num_episodes} episodes already)")

    def _on_joints(self, msg: JointState) -> None:
        try:
            _, q, dq, _ = joint_state_from_msg(msg, self.joints)
            _, grip, grip_dq, _ = (joint_state_from_msg(msg, self.gripper_joints) if self.gripper_joints
                                   else (None, np.zeros(0), np.zeros(0), None))
        except SpecError as exc:
            self.get_logger().warning(f"skipping joint_states: {exc}", throttle_duration_sec=1.0)
            return
        self.joint = (q, np.nan_to_num(dq), float(np.sum(grip)))
        # the measured joint state in MuJoCo's order (arm joints, then the fingers): what sim-to-real alignment
        # replays from (robot_rl.align.layout); a floating base would need its motion capture here too
        self.qstate = (np.r_[q, grip], np.r_[np.nan_to_num(dq), np.nan_to_num(grip_dq)])

    def _on_pose(self, msg: PoseStamped) -> None:
        try:
            self.pose = pose_from_msg(msg)
        except SpecError as exc:
            self.get_logger().warning(f"skipping current_pose: {exc}", throttle_duration_sec=1.0)

    def _on_target(self, msg: PoseStamped, source: str) -> None:
        with contextlib.suppress(SpecError):  # the controller refuses it too: the action in force stays
            self.targets[source] = pose_from_msg(msg)

    def _on_gripper(self, msg: Float64, source: str) -> None:
        if np.isfinite(msg.data):
            self.grippers[source] = float(np.clip(msg.data, 0.0, 1.0))


    def _on_intervention(self, msg: Bool) -> None:
        changed = not self.human_heard or self.human != bool(msg.data)
        self.human, self.human_heard = bool(msg.data), True
        if changed:
            self._status()

    def _on_event(self, msg: String) -> None:
        event = msg.data.strip().lower()
        if event not in ("success", "failure", "stop", "rerecord"):
            self.get_logger().warning(f"unknown episode event {msg.data!r}")
            return
        try:
            index = self.recorder.end(event)
        except OSError as exc:  # disk full: the take is lost, the node keeps recording once space is freed
            self.get_logger().error(f"{event}: {exc}")
            index = None
        if event == "stop":
            self.active = False
        outcome = "discarded" if index is None else f"committed as episode {index}"
        self.get_logger().info(f"{event}: {outcome}")
        self._status()

    def _on_start(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.active = True
        response.success, response.message = True, "recording"
        return response

    def _status(self) -> None:
        state = f"episode open, {self.recorder.steps} steps" if self.recorder.recording else "idle"
        human = "not heard" if not self.human_heard else "ON" if self.human else "off"
        stored = f"{self.store.num_episodes} episodes in store"
        self.pub_status.publish(String(data=f"{state}; {stored}; intervention {human}"))

    def _tick(self) -> None:
        if not self.active or (self.floating is None and (self.joint is None or self.pose is None)):
            return
        images = {key: camera.frame for key, camera in self.cameras.items() if camera.frame is not None}
        if len(images) < len(self.cameras):
            return
        if self.floating is not None:
            self._add_floating(images)
            return
        assert self.joint is not None and self.pose is not None
        q, dq, width = self.joint
        position, quat = self.pose
        obs = {"joint_pos": q.astype(np.float32), "joint_vel": dq.astype(np.float32),
               "gripper_width": np.array([width], np.float32), "tcp_pos": position.astype(np.float32),
               "tcp_quat": quat.astype(np.float32), **images}
        if self.qstate is not None and self.record_qstate:
            obs["qpos"], obs["qvel"] = (x.astype(np.float32) for x in self.qstate)
        source = "human" if self.human else "policy"
        target = self.targets[source] or (position, quat)
        action = np.r_[target[0], target[1], self.grippers[source]].astype(np.float32)
        now = self.get_clock().now().nanoseconds * 1e-9
        if not self._add(obs, action, SegmentSource.HUMAN if self.human else SegmentSource.POLICY, now):
            return
        if self.recorder.steps % 50 == 0:
            self._status()

    def _add_floating(self, images: dict[str, np.ndarray]) -> None:
        """One step of a humanoid or a quadrotor (see :mod:`robot_rl.ros.floating_base_recording`)."""
        assert self.floating is not None
        now = self.get_clock().now().nanoseconds * 1e-9
        sample = self.floating.sample(None if self.joint is None else self.joint[:2], self.human, now)
        if sample is None:
            return
        source = SegmentSource.HUMAN if self.human else SegmentSource.POLICY
        if self._add({**sample[0], **images}, sample[1], source, now) and self.recorder.steps % 50 == 0:
            self._status()

    def _add(self, obs: dict[str, np.ndarray], action: np.ndarray, source: SegmentSource, now: float) -> bool:
        """One sample into the store; a failed write (disk full) is one error line, the node goes on recording."""
        try:
            self.recorder.add(obs, action, source, now)
        except OSError as exc:  # the take was discarded; the next sample starts a new one
            self.get_logger().error(str(exc), throttle_duration_sec=2.0)
            return False
        return True

    def close(self) -> None:
        """Commit the open episode as truncated and release the store."""
        self.recorder.close()
        self.store.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl recorder_node``."""
    return run_node(RecorderNode, args)
