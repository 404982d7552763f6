"""Teleop node: keyboard, gamepad or spacemouse -> end-effector targets, intervention, episode events.

Publishes ``teleop/target_pose`` (PoseStamped) and ``teleop/gripper`` (Float64) while the human is in
control, and ``intervention`` (Bool, latched) whenever control changes hands: the controller's safety
layer lets the human target win while it is true, and the recorder marks those steps. Episode events
(success, failure, re-record, stop) come from device buttons or from the services ``~/success``,
``~/failure``, ``~/rerecord``, ``~/stop`` and go out on ``episode_event`` (String). ``~/set_intervention``
(SetBool) hands control over from a UI. Integration starts from the robot's ``current_pose``; without
one, taking control is refused rather than jumping to a stale target.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from scipy.spatial.transform import Rotation
from std_msgs.msg import Bool, Float64, String
from std_srvs.srv import SetBool, Trigger

from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import pose_from_msg, pose_to_msg
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import EVENTS, LATCHED
from robot_rl.teleop import EpisodeEvent, TeleopCommand, TeleopState
from robot_rl.teleop.devices import KEYBOARD_HELP, open_device


@dataclass(frozen=True)
class TeleopNodeConfig:
    """Teleop node parameters."""

    device: str = "keyboard"
    """keyboard | gamepad | spacemouse."""
    device_path: str = "/dev/tty"
    """A terminal for the keyboard, /dev/input/jsN for a gamepad, /dev/hidrawN for a spacemouse."""
    rate_hz: float = 50.0
    """How often the device is read and targets are published."""
    max_linear_speed: float = 0.15
    """End-effector speed at full deflection [m/s]."""
    max_angular_speed: float = 0.6
    """End-effector angular speed at full deflection [rad/s]."""
    base_frame: str = "base"
    """Frame of published targets; incoming current_pose must use it too."""

    def __post_init__(self) -> None:
        if self.device not in ("keyboard", "gamepad", "spacemouse"):
            raise ValueError(f"device must be keyboard, gamepad or spacemouse, got {self.device!r}")
        if not (0 < self.rate_hz <= 1000):
            raise ValueError(f"rate_hz must be in (0, 1000], got {self.rate_hz}")


class TeleopNode(Node):
    """Reads one teleop device and publishes human targets and episode events."""

    def __init__(self) -> None:
        super().__init__("teleop")
        cfg = self.config = declare_config(self, TeleopNodeConfig)
        self.device = open_device(cfg.device, cfg.device_path)
        self.state = TeleopState(cfg.max_linear_speed, cfg.max_angular_speed)
        self.current_pose: tuple[np.ndarray, np.ndarray] | None = None
        self.pub_target = self.create_publisher(PoseStamped, "teleop/target_pose", 10)
        self.pub_gripper = self.create_publisher(Float64, "teleop/gripper", 10)
        self.pub_intervention = self.create_publisher(Bool, "intervention", LATCHED)
        self.pub_event = self.create_publisher(String, "episode_event", EVENTS)
        self.create_subscription(PoseStamped, "current_pose", self._on_pose, qos_profile_sensor_data)
        for event in EpisodeEvent:
            self.create_service(Trigger, f"~/{event.value}", self._event_service(event))
        self.create_service(SetBool, "~/set_intervention", self._on_set_intervention)
        self._publish_intervention()
        self.create_timer(1.0 / cfg.rate_hz, self._tick)
        if cfg.device == "keyboard":
            self.get_logger().info(KEYBOARD_HELP)

    def _on_pose(self, msg: PoseStamped) -> None:
        try:
            self.current_pose = pose_from_msg(msg, self.config.base_frame)
        except SpecError as exc:
            self.get_logger().warn(f"ignoring current_pose: {exc}", throttle_duration_sec=1.0)

    def _set_intervening(self, value: bool) -> bool:
        if value and not self.state.intervening:
            if self.current_pose is None:
                self.get_logger().warn("cannot take control: no current_pose received yet")
                return False
            position, quat = self.current_pose
            self.state.sync(position, Rotation.from_quat(quat, scalar_first=True).as_rotvec())
        self.state.intervening = value
        self._publish_intervention()
        return True

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
        if self.state.intervening and self.state.position is not None and self.state.rotvec is not None:
            quat = Rotation.from_rotvec(self.state.rotvec).as_quat(scalar_first=True)
            stamp = time.time_ns()
            self.pub_target.publish(pose_to_msg(self.state.position, quat, stamp, self.config.base_frame))
            self.pub_gripper.publish(Float64(data=float(self.state.gripper)))

    def close(self) -> None:
        """Release the device (and restore the terminal)."""
        self.device.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl teleop_node``."""
    return run_node(TeleopNode, args)
