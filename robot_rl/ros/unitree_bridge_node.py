"""Unitree bridge node: a real (or emulated) G1 on the same topics as the humanoid sim graph.

The robot side is Unitree's own low-level DDS protocol (``rt/lowcmd`` / ``rt/lowstate``, ``unitree_hg`` IDL,
Cyclone DDS bound to ``network_interface`` on ``domain_id``), run at ``rate_hz`` on its own thread by
:class:`~robot_rl.hardware.unitree_bridge.UnitreeBridge`; this node only adapts ROS messages to it:

* in: ``target_joint`` (JointState by joint name: position, optional velocity and effort = feed-forward
  torque), exactly as the sim node takes it; ``target_joint_gains`` (JointState by name, latched:
  position = kp [Nm/rad], velocity = kd [Nm s/rad]), the default gains for targets, since a JointState
  has no gain fields and the sim graph's policies never send any; ``safety/estop`` (latched Bool);
* out: ``joint_states`` (position, velocity, effort = the motors' torque estimate), ``imu``
  (sensor_msgs/Imu, pelvis IMU), ``odom`` (nav_msgs/Odometry, :mod:`robot_rl.ros.odometry`), the G1's
  ``robot_description``, ``/tf`` and ``/tf_static`` (:mod:`robot_rl.ros.robot_state`), ``controller/mode``
  (latched) and ``/diagnostics`` (bridge mode: waiting / ramping / hold / active / damping / link_lost, and
  counters), published at once on every mode change.

Odometry: a G1 measures no base position or linear velocity. ``odom`` carries the IMU orientation and a
constant position (0, 0, ``base_height_m``), the gyroscope and a zero linear velocity.
A policy that uses base_quat / projected_gravity / base_angvel gets what it saw in simulation; one that
uses base_height or base_linvel gets these constants (plug a state estimator in for those).
States are published only when a new LowState arrived, so a lost link shows up as silent topics (the
safety node's watchdog) as well as in the diagnostics.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool, String

from robot_rl.control.base import RobotState, TargetRejected
from robot_rl.core.config import ConfigError
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.unitree_bridge import (
    BridgeMode,
    BridgeStatus,
    LowStateReading,
    UnitreeBridge,
    UnitreeBridgeConfig,
)
from robot_rl.hardware.unitree_dds import UnitreeDds
from robot_rl.ros.conversions import joint_state_to_msg
from robot_rl.ros.diagnostics import ERROR, OK, WARN, StatusWrapper, Updater
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_to_msg
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.robot_state import RobotStatePublisher
from robot_rl.ros.target_conversions import joint_gains_from_msg, joint_target_from_msg

_LEVELS = {BridgeMode.ACTIVE: OK, BridgeMode.HOLD: OK, BridgeMode.RAMPING: OK, BridgeMode.WAITING: WARN,
           BridgeMode.DAMPING: WARN, BridgeMode.LINK_LOST: ERROR}


@dataclass(frozen=True)
class UnitreeBridgeNodeConfig(UnitreeBridgeConfig):
    """Bridge parameters plus the network and the ROS side."""

    domain_id: int = 0
    """DDS domain of the robot's network (a G1: 0). Not ROS_DOMAIN_ID: the two never share a participant."""
    network_interface: str = ""
    """NIC wired to the robot (on 192.168.123.0/24, e.g. enp3s0); lo for the emulator; "" = Cyclone picks."""
    state_publish_hz: float = 100.0
    """Rate of joint_states / imu / odom / tf [Hz] (each new LowState at most once)."""
    diagnostics_hz: float = 2.0
    """Rate of /diagnostics [Hz] (plus one message at every mode change)."""
    publish_odometry: bool = True
    """Publish odom (and odom -> base_link) from the IMU (see the module docstring for what is constant)."""
    base_height_m: float = 0.79
    """The constant pelvis height put in odom [m] (G1 standing: 0.79)."""
    base_frame: str = "base"
    """frame_id of joint_states (the sim node's)."""
    imu_frame: str = "pelvis"
    """Frame of imu (the pelvis link of robot_description)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.domain_id <= 232:
            raise ConfigError(f"domain_id must be in [0, 232], got {self.domain_id}")
        if not (self.state_publish_hz > 0 and self.diagnostics_hz > 0):
            raise ConfigError("state_publish_hz and diagnostics_hz must be positive")


class UnitreeBridgeNode(Node):
    """DDS loop on a thread; ROS callbacks and timers on the executor; one lock between them."""

    def __init__(self) -> None:
        super().__init__("unitree_bridge")
        cfg = self.config = declare_config(self, UnitreeBridgeNodeConfig)
        self.bridge = UnitreeBridge(cfg)
        self.joint_names = list(self.bridge.joint_names)
        self._lock = threading.Lock()
        self._warn = RateLimitedWarnings(self.get_logger())
        self.pub_joints = self.create_publisher(JointState, "joint_states", 10)
        self.pub_imu = self.create_publisher(Imu, "imu", 10)
        self.pub_odom = self.create_publisher(Odometry, ODOM_TOPIC, 10) if cfg.publish_odometry else None
        self.pub_mode = self.create_publisher(String, "controller/mode", LATCHED)
        self.frames = RobotStatePublisher(self, cfg.robot, max_rate_hz=2 * cfg.state_publish_hz)  # every state
        self.diagnostics = Updater(self, f"unitree_{cfg.robot}")
        self.diagnostics.add("robot_rl/unitree_bridge", self._diagnose)
        self._status: BridgeStatus | None = None
        self.create_subscription(JointState, "target_joint", self._on_target, 10)
        self.create_subscription(JointState, "target_joint_gains", self._on_gains, LATCHED)
        self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        self._published_stamp = -1.0
        self._last_mode: BridgeMode | None = None
        self._next_diag = 0.0
        self.dds = UnitreeDds(cfg.domain_id, cfg.network_interface or None, idl.LOWCMD_TOPIC, idl.LOWSTATE_TOPIC)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._dds_loop, name="unitree_lowcmd", daemon=True)
        self._thread.start()
        self.create_timer(1.0 / cfg.state_publish_hz, self._publish)
        self.get_logger().info(
            f"{cfg.robot} over Unitree DDS: domain {cfg.domain_id}, interface {cfg.network_interface or 'auto'}, "
            f"LowCmd at {cfg.rate_hz:g} Hz ({'zero-copy codec' if self.dds.fast else 'cyclonedds serializer'}), "
            f"command timeout {cfg.command_timeout_s:g} s, link timeout {cfg.link_timeout_s:g} s")

    # --- the 500 Hz loop (own thread) --------------------------------------------------------------------------
    def _dds_loop(self) -> None:
        period = 1.0 / self.config.rate_hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            states = self.dds.take()
            with self._lock:
                for image in states:
                    self.bridge.on_state(image, now)
                command = self.bridge.tick(now)
            if command is not None:
                self.dds.write(command)
            next_t += period
            if next_t - now < -0.05:
                next_t = now
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    # --- inputs ------------------------------------------------------------------------------------------------
    def _on_target(self, msg: JointState) -> None:
        try:
            target = joint_target_from_msg(msg, self.joint_names)
        except (TargetRejected, ValueError) as exc:
            self._warn(f"rejected target_joint: {exc}")
            return
        with self._lock:
            ok = self.bridge.submit(target, time.monotonic())
            reason = self.bridge.last_refusal
        if not ok:
            self._warn(f"rejected target_joint: {reason}")

    def _on_gains(self, msg: JointState) -> None:
        try:
            kp, kd = joint_gains_from_msg(msg, self.joint_names)
        except (TargetRejected, ValueError) as exc:
            self._warn(f"rejected target_joint_gains: {exc}")
            return
        with self._lock:
            ok = self.bridge.set_gains(kp, kd)
            reason = self.bridge.last_refusal
        if ok:
            self.get_logger().info("default gains updated from target_joint_gains")
        else:
            self._warn(f"rejected target_joint_gains: {reason}")

    def _on_estop(self, msg: Bool) -> None:
        with self._lock:
            self.bridge.estop(bool(msg.data), "safety/estop")

    # --- outputs -----------------------------------------------------------------------------------------------
    def _publish(self) -> None:
        now = time.monotonic()
        with self._lock:
            reading = self.bridge.reading
            status = self.bridge.status(now)
        if reading is not None and reading.stamp > self._published_stamp:
            self._published_stamp = reading.stamp
            self._publish_state(reading)
        if status.mode != self._last_mode:
            self._last_mode = status.mode
            self.pub_mode.publish(String(data=status.mode.value))
            line = f"bridge mode {status.mode.value}: {status.reason}"
            if _LEVELS[status.mode] != OK:  # two call sites: rclpy refuses one site logging at two severities
                self.get_logger().warning(line)
            else:
                self.get_logger().info(line)
            self._next_diag = 0.0
        if now >= self._next_diag:
            self._next_diag = now + 1.0 / self.config.diagnostics_hz
            self._status = status
            self.diagnostics.update()

    def _publish_state(self, reading: LowStateReading) -> None:
        stamp = self.get_clock().now().to_msg()
        stamp_ns = stamp.sec * 1_000_000_000 + stamp.nanosec
        joints = joint_state_to_msg(self.joint_names, reading.q, reading.dq, reading.tau, stamp_ns,
                                    self.config.base_frame)
        self.pub_joints.publish(joints)
        imu = Imu()
        imu.header.stamp, imu.header.frame_id = stamp, self.config.imu_frame
        w, x, y, z = (float(v) for v in reading.quat)
        imu.orientation.w, imu.orientation.x, imu.orientation.y, imu.orientation.z = w, x, y, z
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = (float(v) for v in reading.gyro)
        ax, ay, az = (float(v) for v in reading.accel)
        imu.linear_acceleration.x, imu.linear_acceleration.y, imu.linear_acceleration.z = ax, ay, az
        self.pub_imu.publish(imu)
        base = None
        if self.pub_odom is not None:
            base = (np.array([0.0, 0.0, self.config.base_height_m]), np.asarray(reading.quat, dtype=np.float64))
            state = RobotState(reading.q, reading.dq, 0.0, base[0], base[1], np.zeros(3), reading.gyro)
            self.pub_odom.publish(odometry_to_msg(state, stamp_ns))
        self.frames.publish(stamp_ns, self.joint_names, reading.q, base)

    def _diagnose(self, stat: StatusWrapper) -> None:
        status = self._status
        assert status is not None
        stat.summary(_LEVELS[status.mode], f"{status.mode.value}: {status.reason}")
        stat.add("mode", status.mode.value)
        stat.add("rejected_targets", status.rejected)
        stat.add("bad_crc_states", status.bad_crc)
        stat.add("commands_sent", status.sent)
        stat.add("link_age_s", f"{status.link_age_s:.3f}")
        stat.add("ramp", f"{status.ramp:.2f}")

    def close(self) -> None:
        """Stop the DDS loop: the robot keeps its last command (a robot in debug mode: send damping first)."""
        with self._lock:
            self.bridge.estop(True, "bridge shutting down")
            command = self.bridge.tick(time.monotonic())
        self._stop.set()
        self._thread.join(timeout=1.0)
        if command is not None:
            self.dds.write(command)  # leave the robot in damping, never on a stiff stale target
        self.dds.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl unitree_bridge``."""
    return run_node(UnitreeBridgeNode, args)
