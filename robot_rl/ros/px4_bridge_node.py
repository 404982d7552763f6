"""PX4 bridge node: a PX4 multirotor on the ROS graph exactly where the quadrotor sim node would be.

Same topics as launch/quadrotor_sim.launch.yaml, so a policy trained in simulation runs unchanged: ``odom``
(nav_msgs/Odometry, :mod:`robot_rl.ros.odometry`: the local ENU frame as ``odom``, FLU body as ``base_link``,
from PX4's LOCAL_POSITION_NED and ATTITUDE_QUATERNION) and the same pose on ``/tf`` (odom -> base_link, with the
trained model's ``robot_description``: :mod:`robot_rl.ros.robot_state`) out; ``target_body_rates``
(TwistStamped: angular = body rates FLU [rad/s], linear.z = collective thrust [N] of a vehicle of ``mass``,
scaled to PX4's normalised thrust through the hover throttle), ``target_velocity`` (TwistStamped: linear = ENU
velocity [m/s], angular.z = yaw rate) and ``target_pose`` (PoseStamped: ENU position in the vehicle's local
frame + heading) in. While the latched ``intervention`` flag is true the human commands instead
(``teleop/target_pose``, ``teleop/cmd_vel``: the teleop node's quad_position / quad_velocity modes) and the
policy's commands are dropped (:mod:`robot_rl.ros.intervention`). The latched ``safety/estop`` force-disarms the
vehicle; ``/diagnostics`` reports link, armed state, PX4 mode, landed state and streaming. The link, frames and
handshake are :mod:`robot_rl.hardware.px4_link` (pure core); this node only converts messages. A refused command
(NaN, out of range) is logged with its reason and never sent: the vehicle keeps the last good setpoint until the
stream times out, then PX4's own failsafe holds.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from pymavlink.dialects.v20 import common as mavlink
from rclpy.node import Node
from std_msgs.msg import Bool

from robot_rl.control.base import RobotState
from robot_rl.control.rotations import quat_yaw
from robot_rl.hardware.px4_codec import (
    Setpoint,
    SetpointLimits,
    SetpointRefused,
    ThrustMap,
    frd_to_flu,
    ned_to_enu,
    position_setpoint,
    quat_ned_to_enu,
    rates_setpoint,
    velocity_setpoint,
)
from robot_rl.hardware.px4_link import LANDED_STATES, OffboardSession, Px4Link, SessionConfig
from robot_rl.robots import cf2x
from robot_rl.ros.conversions import pose_from_msg
from robot_rl.ros.diagnostics import ERROR, OK, WARN, StatusWrapper, Updater
from robot_rl.ros.intervention import InterventionGate
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_to_msg
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.robot_state import RobotStatePublisher


@dataclass(frozen=True)
class Px4BridgeConfig(SessionConfig):
    """PX4 bridge parameters: the link, the offboard session (inherited) and how commands are scaled."""

    connection: str = "udpin:0.0.0.0:14540"
    """udpin:HOST:PORT (PX4 SITL / Ethernet: PX4 sends to this port), udpout:HOST:PORT or serial:DEVICE:BAUD."""
    system_id: int = 1
    """Our MAVLink system id (a companion computer shares the vehicle's, as MAVROS does)."""
    component_id: int = 191
    """Our MAVLink component id (MAV_COMP_ID_ONBOARD_COMPUTER)."""
    vehicle_system_id: int = 0
    """The vehicle's MAVLink system id (PX4 MAV_SYS_ID); 0 = the first PX4 heard."""
    tick_hz: float = 100.0
    """How often the session ticks: heartbeat, setpoint stream, handshake, link watch, diagnostics [Hz]
    (telemetry is read by its own thread as it arrives)."""
    hover_thrust: float = 0.0
    """Normalised thrust that hovers the vehicle; 0 = read PX4's MPC_THR_HOVER from the vehicle."""
    mass: float = cf2x.MASS
    """Mass [kg] the thrust of target_body_rates refers to (the model the policy was trained on): its weight
    maps to hover_thrust, so a policy's hover is the vehicle's hover."""
    max_body_rate: float = SetpointLimits.max_body_rate
    """Largest body rate accepted [rad/s] (defaults: :class:`SetpointLimits`)."""
    max_velocity: float = SetpointLimits.max_velocity
    """Largest speed accepted on target_velocity [m/s]."""
    max_yaw_rate: float = SetpointLimits.max_yaw_rate
    """Largest yaw rate accepted on target_velocity [rad/s]."""
    box_low: tuple[float, float, float] = SetpointLimits.box_low
    """Lower corner of accepted target_pose positions, ENU local frame [m]."""
    box_high: tuple[float, float, float] = SetpointLimits.box_high
    """Upper corner of accepted target_pose positions, ENU local frame [m]."""
    robot: str = cf2x.NAME
    """Model published on robot_description (the one the policy was trained on); "" = none, and no /tf."""
    diagnostics_hz: float = 1.0
    """Rate of /diagnostics (also sent at once on every change of link, arming, mode or streaming)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.hover_thrust < 1 or not self.mass > 0:
            raise ValueError(f"hover_thrust must be in [0, 1) and mass > 0, got {self.hover_thrust}, {self.mass}")
        if not self.tick_hz >= self.setpoint_hz:
            raise ValueError(f"tick_hz ({self.tick_hz}) must be >= setpoint_hz ({self.setpoint_hz})")
        if len(self.box_low) != 3 or len(self.box_high) != 3 or np.any(np.subtract(self.box_high, self.box_low) <= 0):
            raise ValueError(f"box_low < box_high needs 3 values each, got {self.box_low}, {self.box_high}")
        if self.diagnostics_hz <= 0:
            raise ValueError(f"diagnostics_hz must be positive, got {self.diagnostics_hz}")


class Px4BridgeNode(Node):
    """ROS topics <-> one PX4 vehicle over MAVLink."""

    def __init__(self) -> None:
        super().__init__("px4_bridge")
        cfg = self.config = declare_config(self, Px4BridgeConfig)
        self.limits = SetpointLimits(cfg.max_body_rate, cfg.max_velocity, cfg.max_yaw_rate, cfg.box_low, cfg.box_high)
        self.link = Px4Link(cfg.connection, cfg.system_id, cfg.component_id, cfg.vehicle_system_id)
        self.session = OffboardSession(self.link, cfg, self._log)
        self.link.listeners.append(self._on_mavlink)
        self.pub_odom = self.create_publisher(Odometry, ODOM_TOPIC, 10)
        self.frames = RobotStatePublisher(self, cfg.robot, max_rate_hz=1e3) if cfg.robot else None
        self.diagnostics = Updater(self, "px4")
        self.diagnostics.add("robot_rl/px4/vehicle", self._diagnose)
        self._warn = RateLimitedWarnings(self.get_logger())
        self.refused = 0
        self.create_subscription(TwistStamped, "target_body_rates", self._on_rates, 10)
        self.create_subscription(TwistStamped, "target_velocity", self._on_velocity, 10)
        self.create_subscription(PoseStamped, "target_pose", self._on_pose, 10)
        self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        self.gate = InterventionGate(self)
        self.create_subscription(PoseStamped, "teleop/target_pose", lambda m: self._on_pose(m, "human"), 10)
        self.create_subscription(TwistStamped, "teleop/cmd_vel", lambda m: self._on_velocity(m, "human"), 10)
        self._summary: tuple[object, ...] = ()
        self._next_diag = 0.0
        self._hover_warned = False
        self._lock = threading.Lock()
        """Serialises the link and session between the executor and the reader thread."""
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="px4_reader", daemon=True)
        self._reader.start()
        self.create_timer(1.0 / cfg.tick_hz, self._tick)
        self.get_logger().info(f"PX4 bridge on {cfg.connection}: setpoints at {cfg.setpoint_hz:g} Hz, "
                               f"auto_arm={cfg.auto_arm}, hover_thrust="
                               f"{cfg.hover_thrust if cfg.hover_thrust else 'from MPC_THR_HOVER'}")

    def _log(self, level: str, text: str) -> None:
        logger = self.get_logger()
        if level == "error":
            logger.error(text)
        elif level == "warn":
            logger.warning(text)
        else:
            logger.info(text)

    # --- commands in ---------------------------------------------------------------------------------------
    def thrust_map(self) -> ThrustMap:
        """Newtons -> PX4 normalised thrust, with the configured or the vehicle's hover throttle."""
        vehicle = self.link.state.params.get("MPC_THR_HOVER")
        hover = self.config.hover_thrust or vehicle
        if hover is None:
            raise SetpointRefused("hover thrust unknown: MPC_THR_HOVER not read from the vehicle yet")
        if vehicle is not None and abs(vehicle - hover) > 0.05 and not self._hover_warned:
            self._hover_warned = True
            self.get_logger().warning(f"hover_thrust {hover:.3f} differs from the vehicle's MPC_THR_HOVER "
                                      f"{vehicle:.3f}")
        return ThrustMap(hover, self.config.mass)

    def _submit(self, topic: str, make: Callable[[], Setpoint], source: str = "policy") -> None:
        if not self.gate.admits(source):
            return
        try:
            setpoint = make()
        except (SetpointRefused, ValueError) as exc:
            self.refused += 1
            self._warn(f"refused {topic}: {exc}")
            return
        with self._lock:
            self.session.command(setpoint, time.monotonic())

    def _on_rates(self, msg: TwistStamped) -> None:
        w = msg.twist.angular
        self._submit("target_body_rates", lambda: rates_setpoint(np.array([w.x, w.y, w.z]), msg.twist.linear.z,
                                                                 self.thrust_map(), self.limits))

    def _on_velocity(self, msg: TwistStamped, source: str = "policy") -> None:
        def make() -> Setpoint:
            lin = msg.twist.linear
            return velocity_setpoint(np.array([lin.x, lin.y, lin.z]), msg.twist.angular.z, self.limits)
        self._submit("teleop/cmd_vel" if source == "human" else "target_velocity", make, source)

    def _on_pose(self, msg: PoseStamped, source: str = "policy") -> None:
        def make() -> Setpoint:
            position, quat = pose_from_msg(msg)
            return position_setpoint(position, quat_yaw(quat), self.limits)
        self._submit("teleop/target_pose" if source == "human" else "target_pose", make, source)

    def _on_estop(self, msg: Bool) -> None:
        with self._lock:
            self.session.set_estop(bool(msg.data), time.monotonic())

    # --- telemetry out -------------------------------------------------------------------------------------
    def _on_mavlink(self, msg: mavlink.MAVLink_message, _now: float) -> None:
        if msg.get_type() != "LOCAL_POSITION_NED":
            return
        st = self.link.state
        state = RobotState(np.zeros(0), np.zeros(0), 0.0, ned_to_enu(st.position_ned),
                           quat_ned_to_enu(st.quat_ned_frd), ned_to_enu(st.velocity_ned), frd_to_flu(st.rates_frd))
        stamp_ns = self.get_clock().now().nanoseconds
        self.pub_odom.publish(odometry_to_msg(state, stamp_ns))
        if self.frames is not None:
            assert state.base_pos is not None and state.base_quat is not None
            self.frames.publish(stamp_ns, (), (), (state.base_pos, state.base_quat))

    def _read_loop(self) -> None:
        """Telemetry as it arrives (odometry is published from here, no timer quantisation)."""
        while not self._stop.is_set():
            readable, _, _ = select.select([self.link], [], [], 0.1)
            if readable:
                with self._lock:
                    self.link.poll()

    def _tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            self.session.tick(now)
            st, s = self.link.state, self.session
            summary = (s.connected, st.armed, st.custom_mode, s.streaming, s.estop, st.landed_state)
            if summary != self._summary or now >= self._next_diag:
                self._summary = summary
                self._next_diag = now + 1.0 / self.config.diagnostics_hz
                self.diagnostics.update()

    def _diagnose(self, stat: StatusWrapper) -> None:
        st, s = self.link.state, self.session
        link = "up" if s.connected else ("lost" if np.isfinite(st.heartbeat_time) else "waiting")
        if not s.connected or s.estop:
            level = ERROR
        elif st.armed and st.mode != "OFFBOARD":
            level = WARN  # a failsafe (or a pilot) has the vehicle
        else:
            level = OK
        hover = self.config.hover_thrust or st.params.get("MPC_THR_HOVER", float("nan"))
        stat.hardware_id = f"px4 system {st.system_id}"
        stat.summary(level, f"link {link}, {'armed' if st.armed else 'disarmed'}, {st.mode}"
                     + (", e-stop" if s.estop else ""))
        for key, value in (("link", link), ("armed", str(st.armed).lower()), ("mode", st.mode),
                           ("landed_state", LANDED_STATES.get(st.landed_state, str(st.landed_state))),
                           ("streaming", str(s.streaming).lower()), ("estop", str(s.estop).lower()),
                           ("setpoints_sent", s.sent), ("refused_commands", self.refused),
                           ("intervention", str(self.gate.human).lower()),
                           ("dropped_policy_commands", self.gate.dropped["policy"]),
                           ("hover_thrust", f"{hover:.4f}"),
                           ("statustext", st.statustext[-1] if st.statustext else "")):
            stat.add(key, value)

    def close(self) -> None:
        """Stop streaming (the vehicle's failsafe takes over) and close the port."""
        self._stop.set()
        self._reader.join(timeout=1.0)
        self.link.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl px4_bridge``."""
    return run_node(Px4BridgeNode, args)
