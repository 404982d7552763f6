"""Crazyflie bridge node: a real (or emulated) Crazyflie 2.x on the quadrotor sim graph's topics.

The node only adapts messages; the link, its reconnects and the fail-safe are the core's
(:class:`robot_rl.hardware.crazyflie_link.CrazyflieLink`, :mod:`robot_rl.hardware.crazyflie_failsafe`).
It looks to a policy exactly as ``sim_node`` with ``robot:=cf2x`` does:

* publishes ``odom`` (nav_msgs/Odometry, :mod:`robot_rl.ros.odometry`, from the vehicle's state estimate
  at the log rate, stamped on arrival) with the same pose on ``/tf`` (odom -> base_link), cf2x's
  ``robot_description`` and ``/tf_static`` (:mod:`robot_rl.ros.robot_state`), ``joint_states`` (no joints,
  as the sim publishes it for cf2x),
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
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
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
from robot_rl.ros.diagnostics import ERROR, OK, WARN, StatusWrapper, Updater
from robot_rl.ros.intervention import InterventionGate
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_to_msg
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.robot_state import RobotStatePublisher

LEVELS = {FlightMode.FLYING: OK, FlightMode.MOTORS_OFF: OK, FlightMode.HOVER: WARN, FlightMode.LANDING: WARN,
          FlightMode.LINK_LOST: ERROR}


@dataclass(frozen=True)
class CrazyflieBridgeConfig(CrazyflieLinkConfig):
    """Crazyflie bridge parameters: the link's (uri, rates, timeouts) plus the node's own.

    The fail-safe's timings come from controllers/cf2x.yaml (``controller_overrides``).
    """

    base_frame: str = "world"
    """Frame of accepted target poses (world-fixed, the odom frame's origin and axes) and of joint_states."""
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
        self.pub_odom = self.create_publisher(Odometry, ODOM_TOPIC, 10)
        self.frames = RobotStatePublisher(self, cf2x.NAME, max_rate_hz=1e3)  # every sample (<= 100 Hz)
        self.pub_joints = self.create_publisher(JointState, "joint_states", 10)
        self.pub_mode = self.create_publisher(String, "controller/mode", LATCHED)
        self.diagnostics = Updater(self, cfg.uri)
        self.diagnostics.add("robot_rl/crazyflie/bridge", self._diagnose)
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
        state = sample.to_robot_state()
        odom = odometry_to_msg(state, stamp_ns)
        self.pub_odom.publish(odom)
        assert state.base_pos is not None and state.base_quat is not None
        self.frames.publish(stamp_ns, (), (), (state.base_pos, state.base_quat))
        joints = JointState()
        joints.header.stamp = odom.header.stamp
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

    def _diagnose(self, stat: StatusWrapper) -> None:
        fs, link = self.failsafe, self.link
        mode = fs.reported_mode
        sample = link.state
        stat.summary(ERROR if fs.estopped else LEVELS[mode], f"{mode.value}: {fs.reason}")
        for key, value in (("mode", mode.value), ("link_up", fs.link_up), ("estop", fs.estopped),
                           ("state_hz", f"{link.state_rate():.1f}"), ("reconnects", link.reconnects),
                           ("last_link_error", link.last_error), ("rejected_targets", fs.rejected),
                           ("last_refusal", fs.last_refusal), ("intervention", self.gate.human),
                           ("dropped_policy_commands", self.gate.dropped["policy"]),
                           ("vbat", f"{sample.vbat if sample is not None else math.nan:.2f}")):
            stat.add(key, value)

    def _publish_diagnostics(self) -> None:
        now = self.get_clock().now()
        self.diagnostics.update(now.nanoseconds)
        sample = self.link.state
        vbat = sample.vbat if sample is not None else math.nan
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
