"""Teleop node: keyboard, gamepad or spacemouse -> the human's command, intervention, episode events.

One node for every embodiment; ``mode`` (:class:`~robot_rl.teleop.TeleopMode`) says what the device commands:

* ``end_effector`` (arms): ``teleop/target_pose`` (PoseStamped) + ``teleop/gripper`` (Float64), integrated
  from the arm's ``current_pose``;
* ``base_velocity`` (humanoids): ``teleop/cmd_vel`` (TwistStamped: linear x/y, angular z in the heading
  frame), the walking policy's ``command`` while the human is in control (the policy node and the recorder
  pick it over ``cmd_vel``; see :func:`subscribe_velocity_commands`);
* ``quad_position`` (quadrotors): ``teleop/target_pose``, a position + yaw setpoint in the world frame
  integrated from the vehicle's ``odom`` (nav_msgs/Odometry; its world-fixed odom frame is taken as
  ``base_frame``, as the sim and the bridges publish it) and kept in the workspace box; the flight
  controller's safety layer follows it as a human target;
* ``quad_velocity`` (quadrotors): ``teleop/cmd_vel`` (TwistStamped, world frame: linear = velocity,
  angular.z = yaw rate), for bridges that take velocity setpoints.

Targets go out only while the human is in control. ``intervention`` (Bool, latched) is published whenever
control changes hands: the controller's safety layer lets human targets win while it is true, and the
recorder and the policy node's actor mark those steps as the human's. Episode events (success, failure,
re-record, stop) come from device buttons or from the services ``~/success``, ``~/failure``,
``~/rerecord``, ``~/stop`` and go out on ``episode_event`` (String). ``~/set_intervention`` (SetBool)
hands control over from a UI. Position modes start integrating from the measured pose; without one,
taking control is refused rather than jumping to a stale target. While ``policy/on_trial`` (latched, from
the policy node behind a deployment gate) is true the console asks the person to stand by: the version
acting is being measured on its own, and a takeover counts as its failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import SetBool, Trigger

from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import ns_to_stamp, pose_from_msg, pose_to_msg
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_from_msg, twist_from_msg
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import EVENTS, LATCHED
from robot_rl.teleop import EpisodeEvent, TeleopCommand, TeleopMode, TeleopState
from robot_rl.teleop.command import BASE_VELOCITY_HIGH, BASE_VELOCITY_LOW, QUAD_WORKSPACE_HIGH, QUAD_WORKSPACE_LOW
from robot_rl.teleop.command_mux import VelocityCommandMux
from robot_rl.teleop.devices import KEYBOARD_HELP, open_device

CMD_VEL_TOPIC = "cmd_vel"
"""The robot's normal velocity command (a navigation stack, a joystick relay)."""
TELEOP_CMD_VEL_TOPIC = "teleop/cmd_vel"
"""The human's velocity command (base_velocity, quad_velocity)."""


@dataclass(frozen=True)
class TeleopNodeConfig:
    """Teleop node parameters."""

    device: str = "keyboard"
    """keyboard | gamepad | spacemouse."""
    device_path: str = "/dev/tty"
    """A terminal for the keyboard, /dev/input/jsN for a gamepad, /dev/hidrawN for a spacemouse."""
    mode: str = "end_effector"
    """end_effector (arms) | base_velocity (humanoids) | quad_position | quad_velocity (quadrotors)."""
    rate_hz: float = 50.0
    """How often the device is read and targets are published."""
    max_linear_speed: float = 0.15
    """Speed at full deflection [m/s] (end_effector, quad_position, quad_velocity)."""
    max_angular_speed: float = 0.6
    """Angular speed at full deflection [rad/s] (end_effector, quad_position, quad_velocity)."""
    velocity_low: tuple[float, ...] = BASE_VELOCITY_LOW
    """base_velocity: (vx, vy, yaw rate) at full negative deflection [m/s, rad/s]."""
    velocity_high: tuple[float, ...] = BASE_VELOCITY_HIGH
    """base_velocity: (vx, vy, yaw rate) at full positive deflection [m/s, rad/s]."""
    workspace_low: tuple[float, ...] = QUAD_WORKSPACE_LOW
    """quad_position: lower corner of the box the setpoint stays in [m, world frame]."""
    workspace_high: tuple[float, ...] = QUAD_WORKSPACE_HIGH
    """quad_position: upper corner of that box [m, world frame]."""
    pose_topic: str = ""
    """Measured pose (PoseStamped) to take over from; "" = current_pose (end_effector) or odom (quad_position,
    nav_msgs/Odometry)."""
    base_frame: str = "base"
    """Frame of published targets; the measured pose must use it too (world for a quadrotor)."""

    def __post_init__(self) -> None:
        if self.device not in ("keyboard", "gamepad", "spacemouse"):
            raise ValueError(f"device must be keyboard, gamepad or spacemouse, got {self.device!r}")
        if self.mode not in {m.value for m in TeleopMode}:
            raise ValueError(f"mode must be one of {[m.value for m in TeleopMode]}, got {self.mode!r}")
        if not (0 < self.rate_hz <= 1000):
            raise ValueError(f"rate_hz must be in (0, 1000], got {self.rate_hz}")
        self.state()  # checks the speeds, the velocity range and the workspace

    def state(self) -> TeleopState:
        """A fresh TeleopState with these limits."""
        try:
            return TeleopState(self.max_linear_speed, self.max_angular_speed, mode=TeleopMode(self.mode),
                               velocity_low=self.velocity_low, velocity_high=self.velocity_high,
                               workspace_low=self.workspace_low, workspace_high=self.workspace_high)
        except SpecError as exc:
            raise ValueError(str(exc)) from None


class TeleopNode(Node):
    """Reads one teleop device and publishes the human's command and episode events."""

    def __init__(self) -> None:
        super().__init__("teleop")
        cfg = self.config = declare_config(self, TeleopNodeConfig)
        self.state = cfg.state()
        self.mode = self.state.mode
        self.device = open_device(cfg.device, cfg.device_path)
        self.current_pose: tuple[np.ndarray, np.ndarray] | None = None
        self.pub_target = self.create_publisher(PoseStamped, "teleop/target_pose", 10)
        self.pub_gripper = self.create_publisher(Float64, "teleop/gripper", 10)
        self.pub_cmd_vel = self.create_publisher(TwistStamped, TELEOP_CMD_VEL_TOPIC, 10)
        self.pub_intervention = self.create_publisher(Bool, "intervention", LATCHED)
        self.pub_event = self.create_publisher(String, "episode_event", EVENTS)
        odometry = not cfg.pose_topic and self.mode == TeleopMode.QUAD_POSITION
        pose_topic = ODOM_TOPIC if odometry else (cfg.pose_topic or "current_pose")
        if odometry:
            self.create_subscription(Odometry, ODOM_TOPIC, self._on_odometry, qos_profile_sensor_data)
        elif self.mode.integrates_pose:
            self.create_subscription(PoseStamped, pose_topic, self._on_pose, qos_profile_sensor_data)
        for event in EpisodeEvent:
            self.create_service(Trigger, f"~/{event.value}", self._event_service(event))
        self.create_service(SetBool, "~/set_intervention", self._on_set_intervention)
        self.policy_on_trial = False
        """The policy node's version acting now is on trial behind a deployment gate (``policy/on_trial``)."""
        self.create_subscription(Bool, "policy/on_trial", self._on_trial, LATCHED)
        self._publish_intervention()
        self.create_timer(1.0 / cfg.rate_hz, self._tick)
        source = f", taking over from {pose_topic}" if self.mode.integrates_pose else ""
        self.get_logger().info(f"{cfg.device} on {cfg.device_path}: {self.mode.value}{source}")
        if cfg.device == "keyboard":
            self.get_logger().info(KEYBOARD_HELP)

    def _on_pose(self, msg: PoseStamped) -> None:
        try:
            self.current_pose = pose_from_msg(msg, self.config.base_frame)
        except SpecError as exc:
            self.get_logger().warning(f"ignoring measured pose: {exc}", throttle_duration_sec=1.0)

    def _on_odometry(self, msg: Odometry) -> None:
        try:
            self.current_pose = odometry_from_msg(msg)[:2]
        except SpecError as exc:
            self.get_logger().warning(f"ignoring measured pose: {exc}", throttle_duration_sec=1.0)

    def _set_intervening(self, value: bool) -> bool:
        if value and not self.state.intervening and self.mode.integrates_pose:
            if self.current_pose is None:
                self.get_logger().warning("cannot take control: no measured pose received yet")
                return False
            from scipy.spatial.transform import Rotation  # here: ~0.3 s of start-up for the nodes importing this

            position, quat = self.current_pose
            self.state.sync(position, Rotation.from_quat(quat, scalar_first=True).as_rotvec())
        self.state.intervening = value
        self._publish_intervention()
        return True

    def _on_trial(self, msg: Bool) -> None:
        if msg.data and not self.policy_on_trial:
            self.get_logger().warning("the policy is on trial: stand by (a takeover counts as its failure)")
        elif self.policy_on_trial and not msg.data:
            self.get_logger().info("the policy's trial is over: take over when needed")
        self.policy_on_trial = bool(msg.data)

    def _publish_intervention(self) -> None:
        self.pub_intervention.publish(Bool(data=self.state.intervening))

    def _emit(self, event: EpisodeEvent) -> None:
        self.pub_event.publish(String(data=event.value))
        self.get_logger().info(f"episode event: {event.value}")

    def _event_service(self, event: EpisodeEvent) -> Callable[[Trigger.Request, Trigger.Response], Trigger.Response]:
        def handle(request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
            self._emit(event)
            response.success, response.message = True, event.value
            return response
        return handle

    def _on_set_intervention(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        response.success = self._set_intervening(bool(request.data))
        response.message = "human in control" if self.state.intervening else "policy in control"
        return response

    def _tick(self) -> None:
        cmd = self.device.poll()
        was = self.state.intervening
        wanted = cmd.intervention_hold if cmd.intervention_hold is not None else (was ^ cmd.intervention_toggle)
        if wanted != was:
            self._set_intervening(wanted)
        # Intervention is settled above; apply motion, gripper and events without toggling again.
        motion = TeleopCommand(cmd.linear, cmd.angular, cmd.gripper, events=cmd.events)
        for event in self.state.apply(motion, 1.0 / self.config.rate_hz):
            self._emit(event)
        if not self.state.intervening:
            return
        stamp = time.time_ns()
        if self.mode.integrates_pose:
            pose = self.state.pose()
            if pose is not None:
                self.pub_target.publish(pose_to_msg(pose[0], pose[1], stamp, self.config.base_frame))
            if self.mode == TeleopMode.END_EFFECTOR:
                self.pub_gripper.publish(Float64(data=float(self.state.gripper)))
        else:
            self.pub_cmd_vel.publish(twist_to_msg(self.state.linear_velocity, self.state.angular_velocity, stamp,
                                                  self.config.base_frame))

    def close(self) -> None:
        """Release the device (and restore the terminal)."""
        self.device.close()


def twist_to_msg(linear: np.ndarray, angular: np.ndarray, stamp_ns: int, frame: str) -> TwistStamped:
    """A velocity command as a TwistStamped."""
    msg = TwistStamped()
    msg.header.stamp, msg.header.frame_id = ns_to_stamp(stamp_ns), frame
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(v) for v in linear)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(v) for v in angular)
    return msg


def subscribe_velocity_commands(node: Node, mux: VelocityCommandMux) -> None:
    """Feed ``mux`` from ``cmd_vel``, ``teleop/cmd_vel`` and the latched ``intervention`` (receipt time, node clock).

    A malformed twist is logged and dropped; the command in force stays until its timeout.
    """
    def on_twist(msg: TwistStamped, source: str) -> None:
        try:
            linear, angular = twist_from_msg(msg)
            mux.update(source, linear, angular, node.get_clock().now().nanoseconds * 1e-9)
        except SpecError as exc:
            node.get_logger().warning(f"ignoring {source} velocity command: {exc}", throttle_duration_sec=1.0)

    node.create_subscription(TwistStamped, CMD_VEL_TOPIC, lambda m: on_twist(m, "robot"), 10)
    node.create_subscription(TwistStamped, TELEOP_CMD_VEL_TOPIC, lambda m: on_twist(m, "human"), 10)
    node.create_subscription(Bool, "intervention", lambda m: setattr(mux, "human", bool(m.data)), LATCHED)


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl teleop_node``."""
    return run_node(TeleopNode, args)
