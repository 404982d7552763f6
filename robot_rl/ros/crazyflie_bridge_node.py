"""Crazyflie bridge node: a real (or emulated) Crazyflie 2.x on the quadrotor sim graph's topics.

The node only adapts messages; the link, its reconnects and the fail-safe are the core's
(:class:`robot_rl.hardware.crazyflie_link.CrazyflieLink`, :mod:`robot_rl.hardware.crazyflie_failsafe`).
It looks to a policy exactly as ``sim_node`` with ``robot:=cf2x`` does:

* publishes ``odom/pose`` + ``odom/twist`` (:mod:`robot_rl.ros.odometry`, from the vehicle's state estimate
  at the log rate, stamped on arrival), ``joint_states`` (no joints, as the sim publishes it for cf2x),
  ``controller/mode`` (latched String: flying | hover_failsafe | landing | motors_off | link_lost),
  ``/diagnostics`` (mode and reason, link, state rate, battery, refusals; at ``diagnostics_hz`` and on every
  mode change) and ``battery`` (sensor_msgs/BatteryState);
* takes ``target_body_rates`` (TwistStamped: angular = body rates [rad/s], linear.z = collective thrust [N])
  and ``target_pose`` (PoseStamped: position setpoint + yaw), both in ``base_frame``, and ``safety/estop``
  (latched Bool: motors off, firmware emergency stop);
* while the latched ``intervention`` flag is true, the human flies instead: ``teleop/target_pose`` (the teleop
  node's quad_position mode) passes and the policy's commands are dropped (:mod:`robot_rl.ros.intervention`).

Crazyswarm2's command topics are not offered: ``cmd_position`` / ``cmd_full_state`` / ``cmd_hover`` use
crazyflie_interfaces messages (not standard), and its one standard-message topic, ``cmd_vel_legacy``
(geometry_msgs/Twist of roll/pitch ANGLES and PWM), would fight the rate mode this bridge puts the
commander in. A refused command is logged with its reason and the vehicle keeps its last safe behaviour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import BatteryState, JointState
from std_msgs.msg import Bool, String

from robot_rl.control.base import TargetRejected
from robot_rl.control.config import load_control_config
from robot_rl.control.rotations import quat_yaw
from robot_rl.core.spaces import SpecError
from robot_rl.hardware.crazyflie_failsafe import (
    CrazyflieFailsafe,
    FailsafeConfig,
    FlightMode,
    PositionCommand,
    RateCommand,
)
from robot_rl.hardware.crazyflie_link import CrazyflieLink, CrazyflieLinkConfig
from robot_rl.hardware.crazyflie_protocol import StateSample
from robot_rl.robots import cf2x
from robot_rl.ros.conversions import ns_to_stamp, pose_from_msg
from robot_rl.ros.intervention import InterventionGate
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import POSE_TOPIC, TWIST_TOPIC, odometry_to_msgs
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings

LEVELS = {FlightMode.FLYING: DiagnosticStatus.OK, FlightMode.MOTORS_OFF: DiagnosticStatus.OK,
          FlightMode.HOVER: DiagnosticStatus.WARN, FlightMode.LANDING: DiagnosticStatus.WARN,
          FlightMode.LINK_LOST: DiagnosticStatus.ERROR}


@dataclass(frozen=True)
class CrazyflieBridgeConfig(CrazyflieLinkConfig):
    """Crazyflie bridge parameters: the link's (uri, rates, timeouts) plus the node's own.

    The fail-safe's timings come from controllers/cf2x.yaml (``controller_overrides``).
    """

    base_frame: str = "world"
    """Frame of odometry and of accepted target poses."""
    body_frame: str = cf2x.BODY
    """Frame of odom/twist (the body, as the sim names it)."""
    controller_overrides: tuple[str, ...] = ()
    """controllers/cf2x.yaml overrides, e.g. ["quadrotor.hover_time=3.0", "safety.watchdog_timeout=0.3"]."""
    max_rate: float = 10.0
    """Largest accepted body rate [rad/s]."""
    diagnostics_hz: float = 1.0
    """Periodic /diagnostics rate [Hz]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.max_rate > 0 and self.diagnostics_hz > 0):
            raise ValueError("max_rate and diagnostics_hz must be positive")


class CrazyflieBridgeNode(Node):
    """Adapts the Crazyflie link to the quadrotor graph's topics."""

    def __init__(self) -> None:
        super().__init__("crazyflie_bridge")
        cfg = self.config = declare_config(self, CrazyflieBridgeConfig)
        control = load_control_config("cf2x", cfg.controller_overrides)
        self.failsafe = CrazyflieFailsafe(FailsafeConfig.from_control_config(control, cfg.max_rate))
        self.pub_pose = self.create_publisher(PoseStamped, POSE_TOPIC, 10)
        self.pub_twist = self.create_publisher(TwistStamped, TWIST_TOPIC, 10)
        self.pub_joints = self.create_publisher(JointState, "joint_states", 10)
        self.pub_mode = self.create_publisher(String, "controller/mode", LATCHED)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.pub_battery = self.create_publisher(BatteryState, "battery", 10)
        self._warn = RateLimitedWarnings(self.get_logger())
        self._mode: FlightMode | None = None
        self.create_subscription(TwistStamped, "target_body_rates", self._on_rates, 10)
        self.create_subscription(PoseStamped, "target_pose", self._on_pose, 10)
        self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        self.gate = InterventionGate(self)
        self.create_subscription(PoseStamped, "teleop/target_pose", lambda m: self._on_pose(m, "human"), 10)
        self.link = CrazyflieLink(cfg, self.failsafe, self._on_state, self._on_mode).start()
        self.create_timer(1.0 / cfg.diagnostics_hz, self._publish_diagnostics)
        self.get_logger().info(f"Crazyflie bridge to {cfg.uri}: state every {cfg.state_period_ms} ms, setpoints at "
                               f"{cfg.command_hz:g} Hz, hover after {self.failsafe.config.watchdog_timeout:g} s "
                               f"without commands, landing after {self.failsafe.config.hover_time:g} s more")

    # --- commands -----------------------------------------------------------------------------------------------
    def _submit(self, topic: str, command: PositionCommand | RateCommand) -> None:
        if not self.gate.admits("human" if topic.startswith("teleop/") else "policy"):
            return
        try:
            self.link.submit(command)
        except TargetRejected as exc:
            self._warn(f"rejected {topic}: {exc}")

    def _on_rates(self, msg: TwistStamped) -> None:
        w = msg.twist.angular
        self._submit("target_body_rates", RateCommand(float(msg.twist.linear.z), np.array([w.x, w.y, w.z])))

    def _on_pose(self, msg: PoseStamped, source: str = "policy") -> None:
        topic = "teleop/target_pose" if source == "human" else "target_pose"
        try:
            position, quat = pose_from_msg(msg, self.config.base_frame)
        except SpecError as exc:
            self.failsafe.rejected += 1
            self._warn(f"rejected {topic}: {exc}")
            return
        self._submit(topic, PositionCommand(position, quat_yaw(quat)))

    def _on_estop(self, msg: Bool) -> None:
        self.link.estop(bool(msg.data), "e-stop (safety/estop)")

    # --- state ----------------------------------------------------------------------------------------------------
    def _on_state(self, sample: StateSample) -> None:
        """A state sample from the link's thread: publish it at once (rclpy publishers are thread-safe)."""
        if not self.context.ok():
            return  # shutting down: the link thread may still deliver a sample
        stamp_ns = self.get_clock().now().nanoseconds
        pose, twist = odometry_to_msgs(sample.to_robot_state(), stamp_ns, self.config.base_frame,
                                       self.config.body_frame)
        self.pub_pose.publish(pose)
        self.pub_twist.publish(twist)
        joints = JointState()
        joints.header.stamp = pose.header.stamp
        joints.header.frame_id = self.config.base_frame
        self.pub_joints.publish(joints)

    def _on_mode(self, mode: FlightMode, reason: str) -> None:
        """A new mode or reason (link thread or a command callback): latched mode, log line, diagnostics."""
        if mode != self._mode:
            self._mode = mode
            self.pub_mode.publish(String(data=mode.value))
        if mode in (FlightMode.LINK_LOST, FlightMode.HOVER, FlightMode.LANDING):
            self.get_logger().warning(f"mode {mode.value}: {reason}")
        else:
            self.get_logger().info(f"mode {mode.value}: {reason}")
        self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        fs, link = self.failsafe, self.link
        mode = fs.reported_mode
        sample = link.state
        vbat = sample.vbat if sample is not None else math.nan
        now = self.get_clock().now()
        array = DiagnosticArray()
        array.header.stamp = now.to_msg()
        level = DiagnosticStatus.ERROR if fs.estopped else LEVELS[mode]
        array.status.append(DiagnosticStatus(
            name="robot_rl/crazyflie/bridge", hardware_id=self.config.uri, level=level,
            message=f"{mode.value}: {fs.reason}",
            values=[KeyValue(key="mode", value=mode.value), KeyValue(key="link_up", value=str(fs.link_up)),
                    KeyValue(key="estop", value=str(fs.estopped)),
                    KeyValue(key="state_hz", value=f"{link.state_rate():.1f}"),
                    KeyValue(key="reconnects", value=str(link.reconnects)),
                    KeyValue(key="last_link_error", value=link.last_error),
                    KeyValue(key="rejected_targets", value=str(fs.rejected)),
                    KeyValue(key="last_refusal", value=fs.last_refusal),
                    KeyValue(key="intervention", value=str(self.gate.human)),
                    KeyValue(key="dropped_policy_commands", value=str(self.gate.dropped["policy"])),
                    KeyValue(key="vbat", value=f"{vbat:.2f}")]))
        self.pub_diag.publish(array)
        if sample is not None and math.isfinite(vbat):
            battery = BatteryState(voltage=float(vbat), present=True)
            battery.header.stamp = ns_to_stamp(now.nanoseconds)
            self.pub_battery.publish(battery)

    def close(self) -> None:
        """Stop the motors and close the link."""
        self.link.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl crazyflie_bridge``."""
    return run_node(CrazyflieBridgeNode, args)
