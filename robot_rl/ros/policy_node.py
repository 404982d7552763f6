"""Policy node: runs a trained policy at its rate and streams its actions as controller targets.

A message adapter for any embodiment: the checkpoint's spec names the observation keys (read from the
graph by :mod:`robot_rl.ros.observation_sources`), the action size, the robot and the control mode; the
action becomes a target by the rule of the env it was trained in (:mod:`robot_rl.runtime.actions`) and
goes out on that mode's topic (:mod:`robot_rl.ros.command_publisher`):

* ``cartesian_delta`` / ``cartesian_pose`` (arms) -> ``target_pose`` (PoseStamped) + ``target_gripper``;
* ``joint_position`` (arms, humanoids) -> ``target_joint`` (JointState with joint names);
* ``thrust_body_rates`` (quadrotor) -> ``target_body_rates`` (TwistStamped: angular = body rates [rad/s],
  linear.z = collective thrust [N]).

History, chunks and hot-swap are the :class:`~robot_rl.runtime.policy_runner.PolicyRunner`'s (threaded):
chunks are predicted off the timer thread so a slow network never delays the stream, and while no chunk
covers a step the last target is re-published (the robot holds) instead of leaving a gap for the
controller's watchdog. Weights appearing in ``weights_dir`` as ``v<N>/`` are checked and swapped in
between chunks; a bad checkpoint is refused and the running weights stay. Also published:
``policy/version`` (Int64, latched) and ``policy/action`` (Float64MultiArray, the raw action).

Actor role (``learner_run`` set, a learner node's run folder): once the run's config is there (its
learner writes it on start), every tick also goes to the learner as a labelled transition
(:class:`~robot_rl.ros.streaming_actor.StreamingActor`). In a ``learner.algorithm: residual`` run the
checkpoint is the frozen base and the node executes it plus the newest published residual
(:class:`~robot_rl.learners.graph_actor.StreamedResidual`, swapped between steps): ``policy/action`` is
the executed action, ``policy/base_action`` the base's, ``policy/version`` the residual's version, and
the executed action takes the same path to the controller (adapter, safety) as any other. The residual
is a small MLP: it runs on the timer thread, after the base's action for the tick is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rclpy.node import Node
from rclpy.publisher import Publisher
from std_msgs.msg import Float64MultiArray, Int64

from robot_rl.control.base import TargetRejected
from robot_rl.core.device import check_device_name
from robot_rl.core.spaces import SpecError
from robot_rl.learners import registry
from robot_rl.learners.fleet_status import this_host
from robot_rl.learners.graph_actor import check_streamable, read_run_config
from robot_rl.learners.tcp_transport import RemoteRun
from robot_rl.learners.wire import parse_address, read_secret, tls_client_context
from robot_rl.policies.base import Policy
from robot_rl.robots import cf2x, robot_module
from robot_rl.ros.camera_inputs import camera_topic
from robot_rl.ros.command_publisher import CommandPublisher
from robot_rl.ros.node_main import run_node
from robot_rl.ros.observation_sources import ObservationSources, parse_constants
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED
from robot_rl.ros.streaming_actor import StreamingActor
from robot_rl.runtime.actions import ActionAdapter, Command, control_mode, make_adapter
from robot_rl.runtime.policy_runner import PolicyRunner


@dataclass(frozen=True)
class PolicyNodeConfig:
    """Policy node parameters."""

    policy_path: str = ""
    """Checkpoint folder (model.safetensors + policy.json) to start from."""
    weights_dir: str = ""
    """Folder watched for newer versions v<N>/ written by a learner; "" disables hot swapping."""
    robot: str = ""
    """Robot driven (joint names, limits); "" = the checkpoint's."""
    control_mode: str = ""
    """How actions become targets (cartesian_delta | cartesian_pose | joint_position | thrust_body_rates);
    "" = the checkpoint's."""
    rate_hz: float = 10.0
    """Action rate [Hz]: the rate the policy was trained at."""
    goal_pos: tuple[float, ...] = ()
    """Value of the goal_pos observation when the policy uses one [m] (shorthand for a constant)."""
    constants: str = ""
    """Observation keys with no sensor, e.g. "goal_vel=0 0 0; command=[0.3, 0, 0]" (task inputs)."""
    inference_steps: int = 0
    """Sampling steps per chunk; 0 keeps the policy's default."""
    device: str = "auto"
    """Where the network runs: auto (CUDA when present) | cpu | cuda[:index]."""
    num_threads: int = 1
    """torch CPU threads for inference; 0 = torch's default (one per core). One is fastest for these small
    networks on a shared machine: on a loaded 2-core machine two threads made a chunk 6x to 170x slower
    (benchmarks/pixel_policy_latency.py)."""
    poll_s: float = 1.0
    """How often weights_dir is checked."""
    base_frame: str = "base"
    """Frame of published targets."""
    learner_run: str = ""
    """Run folder of a learner node to stream transitions to (and take weights from); "" = no learning."""
    send_every: int = 5
    """Steps per transition batch sent to the learner."""
    learner_connect: str = ""
    """host:port of a learner on another machine (its ``fleet.listen``): stream to it over TCP and take its
    config and weights from it; wins over ``learner_run``."""
    learner_secret_file: str = ""
    """Copy of that run's ``learner.key`` (needed with ``learner_connect``)."""
    learner_workdir: str = "robot_rl_actor"
    """With ``learner_connect``: where the run's config, weights and the outbox of unacknowledged steps live."""
    learner_tls_ca: str = ""
    """With ``learner_connect``: PEM certificate the learner's TLS certificate is checked against."""
    actor_name: str = ""
    """This robot's id in the fleet (default: the host name); a replacement with the same id and workdir
    re-sends what the learner has not checkpointed."""
    image_transport: str = "raw"
    """How camera frames arrive: raw (``<camera>/image_raw``, Image) | compressed (``.../compressed``, JPEG
    CompressedImage, what a robot's Wi-Fi link or driver often offers); frames are resized to the policy's size."""

    def __post_init__(self) -> None:
        if not self.policy_path:
            raise ValueError("policy_path: a checkpoint folder is required")
        if self.control_mode:
            control_mode(self.control_mode)
        if not 0 < self.rate_hz <= 200:
            raise ValueError(f"rate_hz must be in (0, 200], got {self.rate_hz}")
        if self.goal_pos and len(self.goal_pos) != 3:
            raise ValueError(f"goal_pos must have 3 values, got {self.goal_pos}")
        parse_constants(self.constants)
        check_device_name(self.device)
        camera_topic("front", self.image_transport)
        if self.learner_connect and not self.learner_secret_file:
            raise ValueError("learner_connect needs learner_secret_file (a copy of the run's learner.key)")
        if self.send_every < 1 or self.poll_s <= 0:
            raise ValueError(f"send_every must be >= 1 and poll_s > 0, got {self.send_every}, {self.poll_s}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0 (0: torch's default), got {self.num_threads}")


class PolicyNode(Node):
    """Streams a policy's actions as controller targets; inference happens off the timer thread."""

    def __init__(self) -> None:
        super().__init__("policy")
        cfg = self.config = declare_config(self, PolicyNodeConfig)
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        policy = Policy.load(cfg.policy_path)
        spec = policy.spec
        robot, mode = cfg.robot or spec.robot, cfg.control_mode or spec.control_mode
        if not robot or not mode:
            raise SpecError(f"{cfg.policy_path}: the checkpoint names no {'robot' if not robot else 'control mode'}; "
                            f"set the node's {'robot' if not robot else 'control_mode'} parameter")
        self.adapter: ActionAdapter = make_adapter(mode, robot, cfg.rate_hz)
        if spec.action_dim != self.adapter.action_dim:
            raise SpecError(f"{cfg.policy_path}: action_dim {spec.action_dim} does not fit control mode "
                            f"{self.adapter.mode.value} on {robot} ({self.adapter.action_dim} values)")
        constants = parse_constants(cfg.constants)
        if cfg.goal_pos:
            constants.setdefault("goal_pos", np.asarray(cfg.goal_pos, np.float32))
        self.remote: RemoteRun | None = None
        if cfg.learner_connect:
            self.remote = RemoteRun(parse_address(cfg.learner_connect), read_secret(cfg.learner_secret_file),
                                    cfg.learner_workdir, cfg.actor_name or this_host(),
                                    tls_client_context(cfg.learner_tls_ca) if cfg.learner_tls_ca else None,
                                    {"host": this_host(), "robot": robot})
            self.remote.join_in_background()
        self.feeds_back = "last_action" in policy.spec.state_dims and robot == cf2x.NAME
        if self.feeds_back:  # the quadrotor's previous action, as the env reports it: rest action first
            constants.setdefault("last_action", cf2x.rest_action(self.adapter.mode).astype(np.float32))
        self.runner = PolicyRunner(policy, self._weights_dir(), num_steps=cfg.inference_steps or None, threaded=True,
                                   on_swap=self._on_swap, on_error=self._on_error, device=cfg.device)
        self.sources = ObservationSources(self, [*self.runner.keys, *self.adapter.measured_keys], robot,
                                          spec.image_shapes, constants, cfg.image_transport)
        emb = robot_module(robot).EMBODIMENT
        self.out = CommandPublisher(self, self.adapter.mode, emb.joint_names, bool(emb.gripper_joints), cfg.base_frame)
        self.pub_action = self.create_publisher(Float64MultiArray, "policy/action", 10)
        self.pub_version = self.create_publisher(Int64, "policy/version", LATCHED)
        self.pub_version.publish(Int64(data=int(self.runner.version)))
        self.last: Command | None = None
        self.actor: StreamingActor | None = None
        self.residual: Any = None
        """What the run's algorithm adds on the policy's action on a graph (a residual), or None."""
        self.pub_base: Publisher | None = None
        learning = cfg.learner_run or cfg.learner_connect
        self._join = self.create_timer(cfg.poll_s, self._join_run) if learning else None
        self._join_run()
        if self._join is not None:
            self.get_logger().info(f"{cfg.learner_connect or cfg.learner_run}: no run config yet; streaming starts "
                                   "when the learner is reached")
        self.create_timer(1.0 / cfg.rate_hz, self._tick)
        if self.runner.watcher is not None:
            self.create_timer(cfg.poll_s, self._poll_weights)
        self.get_logger().info(f"{type(policy).__name__} v{policy.version} from {cfg.policy_path}: {robot}, "
                               f"observation {self.runner.keys}, {self.adapter.mode.value} on {self.out.topic} at "
                               f"{cfg.rate_hz:g} Hz")

    def _run_dir(self) -> Path | None:
        """The learner's run folder, or the local mirror of a learner on another machine."""
        if self.remote is not None:
            return self.remote.folder
        return Path(self.config.learner_run) if self.config.learner_run else None

    def _weights_dir(self) -> str | None:
        run = self._run_dir()
        return self.config.weights_dir or (str(run / "weights") if run is not None else None)

    @property
    def version(self) -> int:
        """What acts now: the residual's version in a residual run, else the policy's."""
        return self.residual.version if self.residual is not None else int(self.runner.version)

    def _join_run(self) -> None:
        """Become the actor of ``learner_run`` once its config is readable (as its algorithm says)."""
        if self._join is None:
            return
        if self.remote is not None and self.remote.error:
            self.get_logger().error(self.remote.error)
            self.destroy_timer(self._join)
            self._join = None
            return
        run = self._run_dir()
        assert run is not None
        online = read_run_config(run)
        if online is None:
            return  # the learner has not written it yet: drive the policy alone, stream nothing
        self.destroy_timer(self._join)
        self._join = None
        try:
            warnings = check_streamable(online, self.adapter.mode.value, self.sources.keys, self.config.policy_path)
        except ValueError as exc:
            self.get_logger().error(f"not streaming to {run}: {exc}")
            return
        for warning in warnings:
            self.get_logger().warn(warning)
        graph_agent = registry.of(online.learner).graph_agent
        if graph_agent is not None:  # e.g. a residual: the base stays frozen, only what the algorithm adds changes
            self.runner.watcher = None
            self.residual = graph_agent(online, run / "weights", on_swap=self._on_residual_swap,
                                        on_error=self._on_error)
            self.pub_base = self.create_publisher(Float64MultiArray, "policy/base_action", 10)
            self.pub_version.publish(Int64(data=0))
        self.actor = StreamingActor(self, run, None if self.remote is None else self.remote.client)
        where = f"at {self.config.learner_connect}" if self.remote is not None else f"of {run}"
        self.get_logger().info(f"streaming to the {online.learner.algorithm} learner {where}")

    def _on_swap(self, version: int) -> None:
        self.pub_version.publish(Int64(data=version))
        self.get_logger().info(f"swapped in weights v{version}")

    def _on_residual_swap(self, version: int) -> None:
        self.pub_version.publish(Int64(data=version))
        self.get_logger().info(f"swapped in residual v{version}")

    def _poll_weights(self) -> None:
        self.runner.poll_weights()

    def _on_error(self, message: str) -> None:
        self.get_logger().error(message)

    def _tick(self) -> None:
        obs = self.sources.observation()
        if obs is None:
            return  # not every input has arrived yet: publish nothing, the controller holds
        action = self.runner.step(obs)
        base = None
        if self.residual is not None and action is not None:
            base, action = action, self.residual.act(obs, action)
        if self.actor is not None:
            self.actor.tick(obs, action, self.version, base)
        if action is None:  # inference is late: hold the last target so the stream never stops
            if self.last is not None:
                self.out.publish(self.last, target_only=True)
            return
        try:
            self.last = self.adapter.to_target(action, obs)
        except TargetRejected as exc:
            self.get_logger().warn(f"action skipped: {exc}", throttle_duration_sec=1.0)
            return
        self.out.publish(self.last)
        if self.feeds_back:
            applied = cf2x.clip_action(self.adapter.mode, np.asarray(action)).astype(np.float32)
            self.sources.constants["last_action"] = applied
        self.pub_action.publish(Float64MultiArray(data=np.asarray(action, np.float64).tolist()))
        if base is not None and self.pub_base is not None:
            self.pub_base.publish(Float64MultiArray(data=np.asarray(base, np.float64).tolist()))

    def close(self) -> None:
        """Stop the inference thread; deliver what the actor still holds."""
        self.runner.close()
        if self.actor is not None:
            self.actor.close()
        if self.remote is not None:
            self.remote.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl policy_node``."""
    return run_node(PolicyNode, args)
