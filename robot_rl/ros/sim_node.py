"""Sim node: a MuJoCo robot under its compliant controller, speaking the same topics as real hardware.

Runs :class:`robot_rl.sim.live.LiveSim` paced to wall time (``real_time_factor``) and publishes
``/clock`` (the other nodes of a sim graph run on it: ``use_sim_time``), ``joint_states``, ``current_pose``
(arms), ``task/object_pose`` (the cube: privileged state for policies trained in simulation), camera streams
``<camera>/image_raw``, ``odom`` (nav_msgs/Odometry) for a floating base (:mod:`robot_rl.ros.odometry`), the
robot's ``robot_description``, ``/tf`` and ``/tf_static`` (:mod:`robot_rl.ros.robot_state`), and the
controller's mode on ``controller/mode`` and ``/diagnostics``. Every message is stamped with simulated time.

Targets, CRISP-compatible: ``target_pose`` (PoseStamped), ``target_joint`` (JointState, by name),
``target_wrench`` (WrenchStamped), ``target_stiffness`` (Float64MultiArray), ``target_body_rates``
(TwistStamped, quadrotor thrust + body rates, see :mod:`robot_rl.ros.target_conversions`), plus ``target_gripper``
(Float64, 0 closed .. 1 open). The human side: ``teleop/target_pose``, ``teleop/gripper`` and the
latched ``intervention`` flag (the safety layer lets only human targets through while it is true).
``safety/estop`` (latched Bool) engages and clears the e-stop; ``~/reset`` (Trigger) resets the scene.
With ``effort_input`` the node instead emulates a torque-controlled robot for an external controller
(e.g. ``controller_node``): it applies ``effort_controller/commands`` (Float64MultiArray) directly, brakes
the joints until the first command and whenever commands go stale, and leaves ``current_pose``,
``controller/mode``, the robot's description and frames, the targets and the e-stop to that controller (it
publishes what a driver does).
A malformed or out-of-limit target is refused with a logged reason and the robot keeps holding.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering; must precede the first mujoco import

import mujoco
import numpy as np
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64, Float64MultiArray, String
from std_srvs.srv import Trigger

from robot_rl.ros.conversions import image_to_msg, joint_state_to_msg, ns_to_stamp, pose_to_msg
from robot_rl.ros.diagnostics import ERROR, OK, WARN, StatusWrapper, Updater
from robot_rl.ros.node_main import run_node
from robot_rl.ros.odometry import ODOM_TOPIC, odometry_to_msg
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.robot_state import RobotStatePublisher
from robot_rl.ros.target_conversions import pose_target_from_msg, subscribe_targets
from robot_rl.sim.live import LiveSim, LiveSimConfig


@dataclass(frozen=True)
class SimNodeConfig(LiveSimConfig):
    """Sim node parameters: the simulation plus how it is published."""

    real_time_factor: float = 1.0
    """Simulated seconds per wall-clock second."""
    tick_hz: float = 100.0
    """How often the node advances the physics and publishes state."""
    cameras: tuple[str, ...] = ()
    """Scene cameras to render and publish (e.g. ["front"]); rendering costs ~10-50 ms per frame on CPU."""
    camera_width: int = 96
    """Rendered image width [px]."""
    camera_height: int = 96
    """Rendered image height [px]."""
    camera_hz: float = 10.0
    """Camera publish rate [Hz]."""
    base_frame: str = "base"
    """Frame of current_pose and of accepted targets (an arm's root link in robot_description)."""
    publish_clock: bool = True
    """Publish /clock with simulated time."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.01 <= self.real_time_factor <= 100:
            raise ValueError(f"real_time_factor must be in [0.01, 100], got {self.real_time_factor}")
        if not 1 <= self.tick_hz <= self.physics_hz:
            raise ValueError(f"tick_hz must be in [1, physics_hz], got {self.tick_hz}")
        if self.camera_width <= 0 or self.camera_height <= 0 or self.camera_hz <= 0:
            raise ValueError("camera_width, camera_height and camera_hz must be positive")


class SimNode(Node):
    """Steps the simulation in real time and adapts its state and commands to ROS messages."""

    def __init__(self) -> None:
        super().__init__("sim")
        cfg = self.config = declare_config(self, SimNodeConfig)
        self.sim = LiveSim(cfg)
        emb = self.sim.embodiment
        self.joint_names = [*emb.joint_names, *emb.gripper_joints]
        self.gripper_qpos = (np.array([self.sim.model.joint(j).qposadr[0] for j in emb.gripper_joints], dtype=int)
                             if emb.gripper_joints else np.zeros(0, dtype=int))
        self.pub_clock = self.create_publisher(Clock, "/clock", 10) if cfg.publish_clock else None
        self.pub_joints = self.create_publisher(JointState, "joint_states", 10)
        hardware = cfg.effort_input  # torque-interface hardware: the external controller owns pose, mode, targets
        self.pub_pose = (self.create_publisher(PoseStamped, "current_pose", 10)
                         if self.sim.description.has_ee and not hardware else None)
        self.pub_object = (self.create_publisher(PoseStamped, "task/object_pose", 10)
                           if self.sim.object_pose() is not None else None)
        self.pub_odom = (self.create_publisher(Odometry, ODOM_TOPIC, 10)
                         if self.sim.description.base is not None else None)
        self.pub_mode = None if hardware else self.create_publisher(String, "controller/mode", LATCHED)
        self.frames = None if hardware else RobotStatePublisher(
            self, cfg.robot, self.sim.model, None if self.sim.description.base else cfg.base_frame,
            max_rate_hz=2 * cfg.tick_hz, stamp_ns=round(self.sim.time * 1e9))  # /tf at every tick
        self.diagnostics = Updater(self, cfg.robot, stamp_ns=lambda: round(self.sim.time * 1e9))
        if hardware:  # the internal controller is not in the loop: report the torque interface
            self.diagnostics.add("robot_rl/sim/torque_interface", self._diagnose_torque_interface)
        else:
            self.diagnostics.add("robot_rl/sim/controller", self._diagnose_controller)
        self.pub_cams = {c: self.create_publisher(Image, f"{c}/image_raw", qos_profile_sensor_data)
                         for c in cfg.cameras}
        self._warn = RateLimitedWarnings(self.get_logger())
        if not hardware:
            subscribe_targets(self, emb.joint_names, self._pose_or_flight, self.sim.submit,
                              lambda: self.sim.status.reason, self._warn)
            self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        policy, human = "policy", "human"
        self.create_subscription(Float64, "target_gripper", lambda m: self._gripper(m, policy), 10)
        self.create_subscription(Float64, "teleop/gripper", lambda m: self._gripper(m, human), 10)
        self.create_subscription(Bool, "intervention", self._on_intervention, LATCHED)
        self.create_service(Trigger, "~/reset", self._on_reset)
        if hardware:
            self.create_subscription(Float64MultiArray, "effort_controller/commands", self._on_effort, 10)
        self.human = False
        self._last_mode = ""
        self._wall0, self._sim0 = time.monotonic(), self.sim.time
        self._next_camera = 0.0
        self._next_diag = 0.0
        self.create_timer(1.0 / cfg.tick_hz, self._tick)
        control = ("torque interface (effort_controller/commands; braked until commanded)" if hardware
                   else f"controller {type(self.sim.controller.inner).__name__}")
        delay_ms = self.sim.command_delay * 1e3
        played = f", playing the real robot: stand-in {cfg.stand_in!r} (commands {delay_ms:.0f} ms late)" \
            if cfg.stand_in else ""
        self.get_logger().info(f"{cfg.robot} at {cfg.physics_hz:g} Hz physics, {control}, cameras {list(cfg.cameras)}"
                               f"{played}")

    # --- inputs -------------------------------------------------------------------------------------------------
    def _pose_or_flight(self, msg: PoseStamped) -> object:
        pose = pose_target_from_msg(msg, self.config.base_frame)
        return self.sim.pose_target(pose.position, pose.quat)  # a flight setpoint for a robot that flies

    def _gripper(self, msg: Float64, source: str) -> None:
        if (source == "human") != self.human:
            return  # the gripper follows whoever is in control
        if not np.isfinite(msg.data):
            self._warn("rejected gripper command: not finite")
            return
        self.sim.set_gripper(msg.data)

    def _on_effort(self, msg: Float64MultiArray) -> None:
        try:
            self.sim.set_effort(np.asarray(msg.data))
        except ValueError as exc:
            self._warn(f"rejected effort_controller/commands: {exc}")

    def _on_intervention(self, msg: Bool) -> None:
        if bool(msg.data) != self.human:
            self.human = bool(msg.data)
            self.sim.set_override(self.human)

    def _on_estop(self, msg: Bool) -> None:
        self.sim.estop(bool(msg.data), "safety/estop")

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.sim.reset()
        self._wall0, self._sim0 = time.monotonic(), self.sim.time
        response.success, response.message = True, "scene reset; holding the home pose"
        return response

    # --- loop ---------------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        cfg = self.config
        due = self._sim0 + (time.monotonic() - self._wall0) * cfg.real_time_factor
        steps = int((due - self.sim.time) * cfg.physics_hz)
        max_steps = int(cfg.physics_hz / cfg.tick_hz * 4)  # never spiral: fall behind instead
        if steps > max_steps:
            self._sim0, self._wall0 = self.sim.time + max_steps / cfg.physics_hz, time.monotonic()
            steps = max_steps
        if steps > 0:
            reason = self.sim.step(steps)
            if reason:
                self.get_logger().error(f"simulation diverged ({reason}); resetting the scene")
                self.sim.reset()
        self._publish_state()

    def _publish_state(self) -> None:
        t = self.sim.time
        stamp_ns = round(t * 1e9)
        if self.pub_clock is not None:
            self.pub_clock.publish(Clock(clock=ns_to_stamp(stamp_ns)))
        state = self.sim.state()
        # a step leaves body and site poses one physics step behind qpos: make current_pose, the object, the
        # cameras and /tf (the URDF's kinematics of joint_states) all show the state published now
        mujoco.mj_kinematics(self.sim.model, self.sim.data)
        q = np.r_[state.q, self.sim.data.qpos[self.gripper_qpos]]
        dq = np.r_[state.dq, np.zeros(self.gripper_qpos.size)]
        tau = np.r_[self.sim.joint_efforts(), np.zeros(self.gripper_qpos.size)]
        self.pub_joints.publish(joint_state_to_msg(self.joint_names, q, dq, tau, stamp_ns, self.config.base_frame))
        if self.pub_pose is not None:
            position, quat = self.sim.ee_pose()
            self.pub_pose.publish(pose_to_msg(position, quat, stamp_ns, self.config.base_frame))
        if self.pub_object is not None:
            obj = self.sim.object_pose()
            assert obj is not None
            self.pub_object.publish(pose_to_msg(obj[0], obj[1], stamp_ns, self.config.base_frame))
        if self.pub_odom is not None:
            self.pub_odom.publish(odometry_to_msg(state, stamp_ns))
        if self.frames is not None:
            base = None if state.base_pos is None or state.base_quat is None else (state.base_pos, state.base_quat)
            self.frames.publish(stamp_ns, self.joint_names, q, base)
        status = self.sim.status
        if self.pub_mode is not None and status.mode.value != self._last_mode:
            self._last_mode = status.mode.value
            self.pub_mode.publish(String(data=status.mode.value))
            self.get_logger().info(f"controller mode {status.mode.value}: {status.reason}")
        if self.pub_cams and t >= self._next_camera:
            self._next_camera = t + 1.0 / self.config.camera_hz
            for name, pub in self.pub_cams.items():
                frame = self.sim.render(name, self.config.camera_height, self.config.camera_width)
                pub.publish(image_to_msg(frame, stamp_ns, name))
        if t >= self._next_diag:  # every simulated second
            self._next_diag = t + 1.0
            self.diagnostics.update(stamp_ns)

    def _real_time_factor(self) -> str:
        return f"{(self.sim.time - self._sim0) / max(time.monotonic() - self._wall0, 1e-9):.2f}"

    def _diagnose_torque_interface(self, stat: StatusWrapper) -> None:
        braked = self.sim.braked
        stat.summary(WARN if braked else OK,
                     "braked: no fresh effort command" if braked else "following effort commands")
        stat.add("real_time_factor", self._real_time_factor())

    def _diagnose_controller(self, stat: StatusWrapper) -> None:
        status = self.sim.status
        stat.summary({"estop": ERROR, "hold": WARN}.get(status.mode.value, OK), f"{status.mode.value}: {status.reason}")
        stat.add("rejected_targets", status.rejected)
        stat.add("real_time_factor", self._real_time_factor())

    def close(self) -> None:
        """Free the renderers."""
        self.sim.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl sim_node``."""
    return run_node(SimNode, args)
