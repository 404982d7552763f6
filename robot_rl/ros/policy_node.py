"""Policy node: runs a trained policy at its rate and streams targets to the controller.

Every ``1 / rate_hz`` the node samples the observation the policy was trained on (``joint_states`` ->
joint_pos / joint_vel / gripper_width, ``current_pose`` -> tcp_pos / tcp_quat, ``task/object_pose`` ->
object_pos / object_quat, ``<camera>/image_raw`` -> image_<camera>, ``goal_pos`` from a parameter) and
publishes the next action of the chunk being executed. Chunks are predicted on a worker thread, so a
slow network never delays the stream: a late chunk is blended in while the old one keeps executing
(see :mod:`robot_rl.policies.chunking`), and if no chunk covers a step yet the last target is
re-published (the arm holds) instead of leaving a gap for the controller's watchdog.

New weights appearing in ``weights_dir`` as folders ``v<version>/`` (a learner writes them) are checked
and swapped in between two chunks; a bad checkpoint is refused and the running weights stay.

Actor role (``learner_run`` set, a learner node's run folder): every tick also becomes a labelled
Transition (:class:`robot_rl.learners.step_stream.StepStream`) streamed to the learner every
``send_every`` steps; while the latched ``intervention`` is true the step is the human's, relabelled
from the tool's measured motion and ``teleop/gripper``; ``episode_event`` (success / failure /
rerecord) ends episodes. If the learner is away, steps queue and go out when it is back.
Output: ``target_pose`` + ``target_gripper`` (arm), ``policy/version`` (Int64, latched) and
``policy/action`` (Float64MultiArray, the raw action) for recorders and learners.

Action formats: ``absolute_pose`` ([x, y, z, qw, qx, qy, qz, gripper 0..1], as the recorder node
stores them) and ``cartesian_delta`` ([dx, dy, dz, droll, dpitch, dyaw] in [-1, 1] + gripper in [-1, 1],
the simulated arm envs' action, integrated exactly as :class:`robot_rl.sim.envs.arm_base.ArmEnv` does).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64, Float64MultiArray, Int64, String

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.actor_process import ReconnectingSender
from robot_rl.learners.step_stream import StepStream
from robot_rl.learners.transport import list_versions
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.policies.chunking import ChunkExecutor
from robot_rl.robots import robot_module
from robot_rl.ros.conversions import image_from_msg, joint_state_from_msg, pose_from_msg, pose_to_msg
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import EVENTS, LATCHED
from robot_rl.sim.arm_actions import CartesianDeltaIntegrator, cartesian_delta_relabel


@dataclass(frozen=True)
class PolicyNodeConfig:
    """Policy node parameters."""

    policy_path: str = ""
    """Checkpoint folder (model.safetensors + policy.json) to start from."""
    weights_dir: str = ""
    """Folder watched for newer versions v<N>/ written by a learner; "" disables hot swapping."""
    robot: str = "panda"
    """Robot name (joint names)."""
    rate_hz: float = 10.0
    """Action rate [Hz]: the rate the policy was trained at."""
    action_format: str = "cartesian_delta"
    """cartesian_delta | absolute_pose (see the module docstring)."""
    goal_pos: tuple[float, ...] = ()
    """Value of the goal_pos observation when the policy uses one [m]."""
    inference_steps: int = 0
    """Sampling steps per chunk; 0 keeps the policy's default."""
    poll_s: float = 1.0
    """How often weights_dir is checked."""
    base_frame: str = "base"
    """Frame of published targets."""
    learner_run: str = ""
    """Run folder of a learner node to stream transitions to (and take weights from); "" = no learning."""
    send_every: int = 5
    """Steps per transition batch sent to the learner."""

    def __post_init__(self) -> None:
        if not self.policy_path:
            raise ValueError("policy_path: a checkpoint folder is required")
        if self.action_format not in ("cartesian_delta", "absolute_pose"):
            raise ValueError(f"action_format must be cartesian_delta or absolute_pose, got {self.action_format!r}")
        if not 0 < self.rate_hz <= 200:
            raise ValueError(f"rate_hz must be in (0, 200], got {self.rate_hz}")
        if self.goal_pos and len(self.goal_pos) != 3:
            raise ValueError(f"goal_pos must have 3 values, got {self.goal_pos}")
        if self.send_every < 1:
            raise ValueError(f"send_every must be >= 1, got {self.send_every}")


class PolicyNode(Node):
    """Streams a policy's actions as controller targets; inference happens off the timer thread."""

    def __init__(self) -> None:
        super().__init__("policy")
        cfg = self.config = declare_config(self, PolicyNodeConfig)
        self.policy = Policy.load(cfg.policy_path)
        expected = 7 if cfg.action_format == "cartesian_delta" else 8
        if self.policy.spec.action_dim != expected:
            raise SpecError(f"{cfg.policy_path}: action_dim {self.policy.spec.action_dim} does not fit "
                            f"action_format {cfg.action_format!r} ({expected} values)")
        self.keys = [*self.policy.state_keys, *self.policy.image_keys]
        known = {"joint_pos", "joint_vel", "gripper_width", "tcp_pos", "tcp_quat", "object_pos", "object_quat"}
        unknown = [k for k in self.policy.state_keys if k not in known and not (k == "goal_pos" and cfg.goal_pos)]
        if unknown:
            raise SpecError(f"{cfg.policy_path}: no source for observation key(s) {unknown} on this graph")
        emb = robot_module(cfg.robot).EMBODIMENT
        self.joints, self.gripper_joints = list(emb.joint_names), list(emb.gripper_joints)
        self.latest: dict[str, np.ndarray] = {}
        if cfg.goal_pos:
            self.latest["goal_pos"] = np.asarray(cfg.goal_pos, np.float32)
        self.chunks_exec = ChunkExecutor(self.policy.config.executor, self.policy.spec.action_dim)
        self.history: deque[dict[str, np.ndarray]] = deque(maxlen=self.policy.config.n_obs_steps)
        self.integrator = CartesianDeltaIntegrator(cfg.rate_hz)
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.pending_version: tuple[int, Path] | None = None
        self.refused: set[int] = set()
        self.last_target: tuple[np.ndarray, np.ndarray] | None = None
        self.late_steps = 0
        self.chunks = 0
        self.create_subscription(JointState, "joint_states", self._on_joints, qos_profile_sensor_data)
        self.create_subscription(PoseStamped, "current_pose", lambda m: self._on_pose(m, "tcp"),
                                 qos_profile_sensor_data)
        self.create_subscription(PoseStamped, "task/object_pose", lambda m: self._on_pose(m, "object"),
                                 qos_profile_sensor_data)
        for key in self.policy.image_keys:
            topic = f"{key.removeprefix('image_')}/image_raw"
            self.create_subscription(Image, topic, lambda m, k=key: self._on_image(m, k), qos_profile_sensor_data)
        self.pub_target = self.create_publisher(PoseStamped, "target_pose", 10)
        self.pub_gripper = self.create_publisher(Float64, "target_gripper", 10)
        self.pub_action = self.create_publisher(Float64MultiArray, "policy/action", 10)
        self.pub_version = self.create_publisher(Int64, "policy/version", LATCHED)
        self.pub_version.publish(Int64(data=int(self.policy.version)))
        self.worker = threading.Thread(target=self._infer_loop, daemon=True)
        self.worker.start()
        self.weights_dir = cfg.weights_dir or (str(Path(cfg.learner_run) / "weights") if cfg.learner_run else "")
        self.actor = None if not cfg.learner_run else StreamingActor(self, Path(cfg.learner_run))
        self.create_timer(1.0 / cfg.rate_hz, self._tick)
        if self.weights_dir:
            self.create_timer(cfg.poll_s, self._poll_weights)
        self.get_logger().info(f"{type(self.policy).__name__} v{self.policy.version} from {cfg.policy_path}, "
                               f"observation {self.keys}, {cfg.action_format} at {cfg.rate_hz:g} Hz")

    # --- observation ------------------------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        try:
            _, q, dq, _ = joint_state_from_msg(msg, self.joints)
            grip = joint_state_from_msg(msg, self.gripper_joints)[1] if self.gripper_joints else np.zeros(1)
        except SpecError as exc:
            self.get_logger().warn(f"skipping joint_states: {exc}", throttle_duration_sec=1.0)
            return
        self.latest.update(joint_pos=q.astype(np.float32), joint_vel=np.nan_to_num(dq).astype(np.float32),
                           gripper_width=np.array([np.sum(grip)], np.float32))

    def _on_pose(self, msg: PoseStamped, which: str) -> None:
        try:
            position, quat = pose_from_msg(msg)
        except SpecError as exc:
            self.get_logger().warn(f"skipping {which} pose: {exc}", throttle_duration_sec=1.0)
            return
        self.latest[f"{which}_pos"], self.latest[f"{which}_quat"] = position.astype(np.float32), quat.astype(np.float32)
        if which == "tcp":
            self.integrator.observe(position, quat)

    def _on_image(self, msg: Image, key: str) -> None:
        try:
            self.latest[key] = np.array(image_from_msg(msg, self.policy.spec.image_shapes[key]))
        except SpecError as exc:
            self.get_logger().warn(f"skipping {key}: {exc}", throttle_duration_sec=1.0)

    # --- acting -----------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        if any(k not in self.latest for k in self.keys):
            return  # not every input has arrived yet: publish nothing, the controller holds
        with self.lock:
            self.history.append({k: self.latest[k] for k in self.keys})
            if self.chunks_exec.needs_chunk():
                self.wake.set()
            try:
                action = self.chunks_exec.next_action()
            except RuntimeError:
                action = None  # the chunk for this step is not ready: inference is late
        if self.actor is not None:
            self.actor.tick(action)
        if action is None:
            self.late_steps += 1
            if self.last_target is not None:  # hold the last target so the stream never stops
                self.pub_target.publish(pose_to_msg(*self.last_target, self.get_clock().now().nanoseconds,
                                                    self.config.base_frame))
            return
        self._publish(action)

    def _publish(self, action: np.ndarray) -> None:
        if self.config.action_format == "cartesian_delta":
            position, quat = self.integrator.step(action[:6])
            gripper = float((np.clip(action[6], -1, 1) + 1) / 2)
        else:
            position, quat, gripper = action[:3], action[3:7], float(np.clip(action[7], 0, 1))
            norm = np.linalg.norm(quat)
            if not np.isfinite(norm) or norm < 0.5:
                self.get_logger().warn("policy produced an invalid orientation; action skipped",
                                       throttle_duration_sec=1.0)
                return
            quat = quat / norm
        stamp = self.get_clock().now().nanoseconds
        self.last_target = (np.asarray(position, np.float64), np.asarray(quat, np.float64))
        self.pub_target.publish(pose_to_msg(position, quat, stamp, self.config.base_frame))
        self.pub_gripper.publish(Float64(data=gripper))
        self.pub_action.publish(Float64MultiArray(data=np.asarray(action, np.float64).tolist()))

    def _infer_loop(self) -> None:
        while not self.stop.is_set():
            if not self.wake.wait(timeout=0.2):
                continue
            self.wake.clear()
            with self.lock:
                if not self.history:
                    continue
                start = self.chunks_exec.step
                frames = list(self.history)
                frames = [frames[0]] * (self.history.maxlen - len(frames)) + frames  # type: ignore[operator]
            self._swap_if_pending()
            stacked = {k: np.stack([f[k] for f in frames]) for k in self.keys}
            steps = self.config.inference_steps or None
            chunk = self.policy.predict_chunk(stacked, num_steps=steps)
            with self.lock:
                try:
                    self.chunks_exec.add_chunk(chunk, start_step=start)
                    self.chunks += 1
                except ValueError as exc:
                    self.get_logger().error(f"chunk rejected: {exc}")

    def _poll_weights(self) -> None:
        versions = list_versions(self.weights_dir)
        if versions:
            version, path = max(versions)
            newer = version > self.policy.version and version not in self.refused
            if newer and (self.pending_version is None or version > self.pending_version[0]):
                self.pending_version = (version, path)

    def _swap_if_pending(self) -> None:
        pending, self.pending_version = self.pending_version, None
        if pending is None:
            return
        version, path = pending
        try:
            self.policy.load_weights(path, version=version, immediately=True)
        except (CheckpointError, OSError, ValueError) as exc:
            self.refused.add(version)
            self.get_logger().error(f"refused weights {path}: {exc}; keeping v{self.policy.version}")
            return
        self.pub_version.publish(Int64(data=version))
        self.get_logger().info(f"swapped in weights v{version} from {path}")

    def close(self) -> None:
        """Stop the inference thread; deliver what the actor still holds."""
        self.stop.set()
        self.wake.set()
        self.worker.join(timeout=5.0)
        if self.actor is not None:
            self.actor.close()


class StreamingActor:
    """The policy node's actor role: ticks -> transitions -> the learner (see the module docstring)."""

    def __init__(self, node: PolicyNode, run: Path) -> None:
        self.node = node
        fmt = node.config.action_format
        self.stream = StepStream(cartesian_delta_relabel(node.config.rate_hz) if fmt == "cartesian_delta"
                                 else _absolute_relabel)
        self.sender = ReconnectingSender(run, limit=100_000)
        self.pending: list[Transition] = []
        self.human = False
        self.human_gripper = 1.0
        self.last_action: np.ndarray | None = None
        self.keys = sorted({*node.keys, "tcp_pos", "tcp_quat"})
        node.create_subscription(Bool, "intervention", self._on_intervention, LATCHED)
        node.create_subscription(Float64, "teleop/gripper", self._on_gripper, 10)
        node.create_subscription(String, "episode_event", self._on_event, EVENTS)

    def _on_intervention(self, msg: Bool) -> None:
        self.human = bool(msg.data)

    def _on_gripper(self, msg: Float64) -> None:
        if np.isfinite(msg.data):
            self.human_gripper = float(np.clip(msg.data, 0.0, 1.0))

    def _obs(self) -> dict[str, np.ndarray] | None:
        latest = self.node.latest
        return None if any(k not in latest for k in self.keys) else {k: latest[k].copy() for k in self.keys}

    def _emit(self, t: Transition | None, flush: bool = False) -> None:
        if t is not None:
            self.pending.append(t)
        if self.pending and (flush or len(self.pending) >= self.node.config.send_every):
            self.sender.send(self.pending)
            self.pending = []

    def tick(self, action: np.ndarray | None) -> None:
        """One control period: the proposal in force (the last one when inference is late)."""
        obs = self._obs()
        if action is not None:
            self.last_action = np.asarray(action, np.float32)
        if obs is None or self.last_action is None:
            return
        stamp = self.node.get_clock().now().nanoseconds * 1e-9
        self._emit(self.stream.tick(obs, self.last_action, self.human, self.node.policy.version,
                                    self.human_gripper, stamp))

    def _on_event(self, msg: String) -> None:
        event, obs = msg.data.strip().lower(), self._obs()
        if event == "rerecord":
            self.stream.discard_episode()
        elif event in ("success", "failure") and obs is not None:
            stamp = self.node.get_clock().now().nanoseconds * 1e-9
            self._emit(self.stream.end_episode(obs, event == "success", self.human_gripper, stamp), flush=True)

    def close(self) -> None:
        """Send what is pending (briefly) and disconnect."""
        self._emit(None, flush=True)
        self.sender.flush(timeout=2.0)
        self.sender.close()


def _absolute_relabel(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray], gripper: float) -> np.ndarray:
    """Absolute-pose policies: the human's step is the pose the tool reached, plus the gripper command."""
    return np.r_[after["tcp_pos"], after["tcp_quat"], gripper].astype(np.float32)


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl policy_node``."""
    return run_node(PolicyNode, args)

