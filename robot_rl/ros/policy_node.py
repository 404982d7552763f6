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

Actor role (``learner_run`` set, a learner node's run folder, or ``learner_connect``, a learner on another
machine: :class:`~robot_rl.learners.graph_actor.LearnerLink`): once the run's config is there (its
learner writes it on start), every tick also goes to the learner as a labelled transition
(:class:`~robot_rl.ros.streaming_actor.StreamingActor`). When the run's algorithm adds to the policy on a
graph (its registry entry's ``graph_agent``, e.g. a residual) the checkpoint is the frozen base and the
node executes what the algorithm makes of its action (the newest published residual, swapped between
steps): ``policy/action`` is the executed action, ``policy/base_action`` the base's, ``policy/version`` the
algorithm's version, and the executed action takes the same path to the controller (adapter, safety) as
any other. It runs on the timer thread, after the base's action for the tick is known. Behind the run's
deployment gate (``learner.gate``) ``policy/on_trial`` (Bool, latched) says whether the acting version is on
trial: its episodes are the policy's own, the person at the teleop stands by (a takeover counts as the
trial's failure; the teleop node says so on its console).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from rclpy.node import Node
from rclpy.publisher import Publisher
from std_msgs.msg import Bool, Float64MultiArray, Int64

from robot_rl.control.base import TargetRejected
from robot_rl.core.spaces import SpecError
from robot_rl.learners.graph_actor import LearnerLink
from robot_rl.policies.base import Policy
from robot_rl.robots import robot_module
from robot_rl.ros.command_publisher import CommandPublisher
from robot_rl.ros.node_main import run_node
from robot_rl.ros.observation_sources import ObservationSources, parse_constants
from robot_rl.ros.params import declare_config
from robot_rl.ros.policy_node_config import PolicyNodeConfig
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.streaming_actor import StreamingActor
from robot_rl.runtime.actions import ActionAdapter, Command, LastActionFeedback, make_adapter
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.sim.envs.humanoid_gait import GAIT_CLOCK, gait_clock

__all__ = ["PolicyNode", "PolicyNodeConfig", "main"]


class PolicyNode(Node):
    """Streams a policy's actions as controller targets; inference happens off the timer thread."""

    def __init__(self) -> None:
        super().__init__("policy")
        cfg = self.config = declare_config(self, PolicyNodeConfig)
        self._errors = RateLimitedWarnings(self.get_logger(), level="error")
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
        self.link = LearnerLink(cfg.learner_run, cfg.learner_connect, cfg.learner_secret_file, cfg.learner_workdir,
                                cfg.learner_tls_ca, cfg.actor_name, {"robot": robot})
        self.feedback = LastActionFeedback.of(robot, self.adapter.mode, spec.state_dims)
        if self.feedback is not None:  # e.g. the quadrotor's previous action, as the env reports it
            constants.setdefault(LastActionFeedback.KEY, self.feedback.initial())
        self.clock_start: float | None = None
        """When the gait clock started (the first tick with every input): a walking policy's ``gait_clock``
        counts from there as HumanoidWalk's counts from its reset."""
        if GAIT_CLOCK in spec.state_dims:
            constants.setdefault(GAIT_CLOCK, gait_clock(0.0))
        weights = self.link.weights_dir(cfg.weights_dir)
        self.runner = PolicyRunner(policy, weights, num_steps=cfg.inference_steps or None, threaded=True,
                                   on_swap=self._on_swap, on_error=self._on_error, device=cfg.device)
        self.sources = ObservationSources(self, [*self.runner.keys, *self.adapter.measured_keys], robot,
                                          spec.image_shapes, constants, cfg.image_transport, cfg.camera_timeout_s)
        emb = robot_module(robot).EMBODIMENT
        self.out = CommandPublisher(self, self.adapter.mode, emb.joint_names, bool(emb.gripper_joints), cfg.base_frame)
        self.pub_action = self.create_publisher(Float64MultiArray, "policy/action", 10)
        self.pub_version = self.create_publisher(Int64, "policy/version", LATCHED)
        self.pub_version.publish(Int64(data=int(self.runner.version)))
        self.pub_trial = self.create_publisher(Bool, "policy/on_trial", LATCHED)
        self._trial: bool | None = None
        self.last: Command | None = None
        self.actor: StreamingActor | None = None
        self.residual: Any = None
        """What the run's algorithm adds on the policy's action on a graph (a residual), or None."""
        self.pub_base: Publisher | None = None
        self._join = self.create_timer(cfg.poll_s, self._join_run) if self.link.enabled else None
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

    @property
    def version(self) -> int:
        """What acts now: the algorithm's version where it adds to the policy (a residual's), else the policy's."""
        return self.residual.version if self.residual is not None else int(self.runner.version)

    def _stop_joining(self) -> None:
        if self._join is not None:
            self.destroy_timer(self._join)
            self._join = None

    def _join_run(self) -> None:
        """Become the actor of the learner's run once its config is readable (as its algorithm says)."""
        if self._join is None:
            return
        if self.link.error:
            self.get_logger().error(self.link.error)
            return self._stop_joining()
        try:
            online = self.link.join(self.adapter.mode.value, self.sources.keys, self.config.policy_path,
                                    self.get_logger().warn)
        except ValueError as exc:
            self._stop_joining()
            self.get_logger().error(f"not streaming to {self.link.run_dir}: {exc}")
            return
        if online is None:
            return  # the learner has not written it yet: drive the policy alone, stream nothing
        self._stop_joining()
        self.residual = self.link.graph_agent(online, self._on_residual_swap, self._on_error)
        if self.residual is not None:  # the base stays frozen; only what the algorithm adds changes
            self.runner.watcher = None
            self.pub_base = self.create_publisher(Float64MultiArray, "policy/base_action", 10)
            self.pub_version.publish(Int64(data=0))
        run = self.link.run_dir
        assert run is not None
        self.actor = StreamingActor(self, run, self.link.sender, self.adapter.relabel, lambda: self.version,
                                    self.config.send_every, self.sources.observation)
        self.get_logger().info(f"streaming to the {online.learner.algorithm} learner {self.link.where}")
        self._announce(self.version)

    def _on_swap(self, version: int) -> None:
        self.pub_version.publish(Int64(data=version))
        self.get_logger().info(f"swapped in weights v{version}")
        self._announce(version)

    def _on_residual_swap(self, version: int) -> None:
        self.pub_version.publish(Int64(data=version))
        self.get_logger().info(f"swapped in residual v{version}")
        self._announce(version)

    def _announce(self, version: int) -> None:
        """``policy/on_trial`` for the version acting now, and a line when that changes."""
        trial = self.link.on_trial(version)
        self.pub_trial.publish(Bool(data=trial))
        if trial != self._trial and (trial or self._trial is not None):
            self.get_logger().warning(f"v{version} is on trial: hands off, a takeover counts as its failure" if trial
                                   else f"v{version} is deployed: take over when needed")
        self._trial = trial

    def _poll_weights(self) -> None:
        self.runner.poll_weights()

    def _on_error(self, message: str) -> None:
        """A rejected chunk or weights version, logged once per second per reason.

        A dead policy (a LeRobot child process gone) repeats on every inference tick.
        """
        self._errors(message)

    def _tick(self) -> None:
        if GAIT_CLOCK in self.sources.constants and self.clock_start is not None:
            self.sources.constants[GAIT_CLOCK] = gait_clock(self._now() - self.clock_start)
        obs = self.sources.observation()
        if obs is None:  # an input not there yet or a camera silent: publish nothing, the controller holds
            if stale := self.sources.stale_cameras():
                silent = ", ".join(f"{k} silent for {age:.2f} s" for k, age in stale.items())
                self.get_logger().warning(f"holding: {silent} (camera_timeout_s {self.config.camera_timeout_s:g}): not "
                                          "acting on a stale frame", throttle_duration_sec=1.0)
            return
        if self.clock_start is None:
            self.clock_start = self._now()
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
            self.get_logger().warning(f"action skipped: {exc}", throttle_duration_sec=1.0)
            return
        self.out.publish(self.last)
        if self.feedback is not None:
            self.sources.constants[LastActionFeedback.KEY] = self.feedback.applied(action)
        self.pub_action.publish(Float64MultiArray(data=np.asarray(action, np.float64).tolist()))
        if base is not None and self.pub_base is not None:
            self.pub_base.publish(Float64MultiArray(data=np.asarray(base, np.float64).tolist()))

    def _now(self) -> float:
        """The node's clock [s] (simulated time under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def close(self) -> None:
        """Stop the inference thread; deliver what the actor still holds."""
        self.runner.close()
        if self.actor is not None:
            self.actor.close()
        self.link.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl policy_node``."""
    return run_node(PolicyNode, args)
