"""Controller node: the compliant controller for real hardware with a torque interface.

Subscribes ``joint_states`` (the robot's measured state) and the same CRISP-style targets as the sim node
(``target_pose``, ``target_joint``, ``target_wrench``, ``target_stiffness``, ``teleop/target_pose`` with
``intervention``, latched ``safety/estop``) and publishes joint torques at ``rate_hz`` on
``effort_controller/commands`` (std_msgs/Float64MultiArray, the ros2_control forward effort controller's input),
plus ``current_pose`` (arms, from the model's forward kinematics), the robot's ``robot_description``, ``/tf``
and ``/tf_static`` (:mod:`robot_rl.ros.robot_state`: the chain from ``base_frame`` to the tool frame is
``current_pose``), ``controller/mode`` and ``/diagnostics``. Kinematics and dynamics come from the robot's
MuJoCo model (the role Pinocchio plays in CRISP). If ``joint_states`` goes silent for ``state_timeout_s`` the
node latches the e-stop and publishes zero torques: it never computes torques from a stale state. A tick that
ran late because this node itself was starved (joint_states that arrived meanwhile are still queued) publishes
zero torques until a fresh state arrives and e-stops only if none comes within ``state_timeout_s``, as the
safety node does (:class:`~robot_rl.control.watchdog.StarvationGuard`).

A Python loop is not a hard real-time loop: for 1 kHz torque control on a real arm, run CRISP's C++
controllers (``real_arm_crisp.launch.yaml``) and let robot_rl stream targets. Measured here with the
emulated arm: at 250 Hz across processes (4-6 ms from measurement to torque) CRISP's default wrist
damping (2 sqrt(30) Nm s/rad on ~0.01 kg m^2 links) is unstable, so a slower loop needs softer
rotational gains (``overrides``, see real_arm.launch.yaml); this node suits robots and rates where a
few milliseconds of delay are acceptable, and dry runs of the graph.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String

from robot_rl.control.base import RobotState
from robot_rl.control.config import build_controller, load_control_config
from robot_rl.control.rotations import mat_to_quat
from robot_rl.control.safety import SafetyLayer
from robot_rl.control.watchdog import StarvationGuard, Watchdog
from robot_rl.core.spaces import SpecError
from robot_rl.robots import robot_module
from robot_rl.ros.conversions import joint_state_from_msg, pose_to_msg, stamp_to_seconds
from robot_rl.ros.diagnostics import ERROR, OK, StatusWrapper, Updater
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings
from robot_rl.ros.robot_state import RobotStatePublisher
from robot_rl.ros.target_conversions import pose_target_from_msg, subscribe_targets


@dataclass(frozen=True)
class ControllerNodeConfig:
    """Controller node parameters."""

    robot: str = "panda"
    """Robot name; gains from controllers/<robot>.yaml."""
    controller: str = ""
    """Section of controllers/<robot>.yaml to run (cartesian | joint); "" = its default."""
    rate_hz: float = 500.0
    """Torque command rate [Hz]."""
    state_timeout_s: float = 0.05
    """joint_states older than this latches the e-stop and zeroes the torques [s]."""
    command_topic: str = "effort_controller/commands"
    """Where the torques go (a ros2_control forward effort controller's input)."""
    base_frame: str = "base"
    """Frame of current_pose and of accepted Cartesian targets (the root link of robot_description)."""
    overrides: tuple[str, ...] = ()
    """``section.field=value`` overrides of controllers/<robot>.yaml, e.g. softer gains for a slower loop."""

    def __post_init__(self) -> None:
        if not 1 <= self.rate_hz <= 2000:
            raise ValueError(f"rate_hz must be in [1, 2000], got {self.rate_hz}")
        if self.state_timeout_s <= 0:
            raise ValueError(f"state_timeout_s must be positive, got {self.state_timeout_s}")


class ControllerNode(Node):
    """Computes torques from measured joint states and the latest safe target."""

    def __init__(self) -> None:
        super().__init__("controller")
        cfg = self.config = declare_config(self, ControllerNodeConfig)
        self.robot = robot_module(cfg.robot)
        self.embodiment = self.robot.EMBODIMENT
        self.model = self.robot.load_model()
        control_config = load_control_config(cfg.robot, cfg.overrides)
        controller = build_controller(cfg.robot, self.model, None, mode=cfg.controller or None, config=control_config)
        assert isinstance(controller, SafetyLayer)
        self.controller: SafetyLayer = controller
        self.arm_model = getattr(controller.inner, "model", None)
        self.state: RobotState | None = None
        self.state_watchdog = Watchdog(cfg.state_timeout_s)
        """Fed by every accepted joint_states (monotonic time); stale -> e-stop."""
        self.human = False
        self._warn = RateLimitedWarnings(self.get_logger())
        self._last_mode = ""
        self.starvation = StarvationGuard(cfg.state_timeout_s / 2)
        """Excuses joint_states after this node's own late tick (see :class:`StarvationGuard`)."""
        self.pub_cmd = self.create_publisher(Float64MultiArray, cfg.command_topic, 10)
        self.pub_pose = self.create_publisher(PoseStamped, "current_pose", 10) if self.arm_model else None
        self.pub_mode = self.create_publisher(String, "controller/mode", LATCHED)
        self.frames = RobotStatePublisher(self, cfg.robot, self.model, cfg.base_frame, stamp_ns=time.time_ns())
        self.grippers = list(self.embodiment.gripper_joints)
        self.gripper_q: np.ndarray | None = None
        """Finger positions from joint_states when the driver reports them (for /tf only)."""
        self.diagnostics = Updater(self, cfg.robot, period=1.0, stamp_ns=time.time_ns)
        self.diagnostics.add("robot_rl/controller", self._diagnose)
        self.create_subscription(JointState, "joint_states", self._on_joint_states, qos_profile_sensor_data)
        subscribe_targets(self, self.embodiment.joint_names, lambda m: pose_target_from_msg(m, cfg.base_frame),
                          lambda target, source: self.controller.submit(target, self._now(), source),
                          lambda: self.controller.status.reason, self._warn)
        self.create_subscription(Bool, "intervention", self._on_intervention, LATCHED)
        self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        self.create_timer(1.0 / cfg.rate_hz, self._tick)

    def _now(self) -> float:
        return time.monotonic()


    def _on_joint_states(self, msg: JointState) -> None:
        try:
            _, q, dq, _ = joint_state_from_msg(msg, self.embodiment.joint_names)
        except SpecError as exc:
            self._warn(f"rejected joint_states: {exc}")
            return
        if not np.all(np.isfinite(dq)):
            self._warn("rejected joint_states: velocities missing or not finite")
            return
        if self.grippers and set(self.grippers) <= set(msg.name):
            self.gripper_q = joint_state_from_msg(msg, self.grippers)[1]
        first = self.state is None
        if first:  # the compiled law's first call is slow (~0.7 s): take it here, not in a control tick
            self.controller.warm_up(RobotState(q, dq, self._now()))  # ends holding q
        self.state = RobotState(q, dq, self._now())  # stamped after the warm-up, which did not starve the watchdog
        self.state_watchdog.feed(self.state.stamp)
        if first:
            self.get_logger().info(f"first joint state (stamp {stamp_to_seconds(msg.header.stamp):.3f}): holding")

    def _on_intervention(self, msg: Bool) -> None:
        if self.state is not None and bool(msg.data) != self.human:
            self.human = bool(msg.data)
            if self.human:
                self.controller.engage_override(self._now())
            else:
                self.controller.release_override(self.state)

    def _on_estop(self, msg: Bool) -> None:
        if msg.data:
            self.controller.estop(self._now(), "safety/estop")
        elif self.state is not None:
            self.controller.clear_estop(self.state)

    def _tick(self) -> None:
        now = self._now()
        gap = self.starvation.tick(now)
        if gap is not None:
            self._warn(f"control ticks {gap:.3f} s apart (this node was starved): zero torques until a fresh "
                       f"joint_states, e-stop if none within {self.config.state_timeout_s} s")
        if self.state is None:
            return  # nothing measured yet: publish nothing rather than a guess
        if self.state_watchdog.stale(now):
            if (not self.starvation.excused(self.state_watchdog, now)
                    and self.controller.mode.value != "estop"):
                self.controller.estop(now, f"joint_states stale for {self.state_watchdog.age(now):.3f} s")
            torques = np.zeros(self.controller.n_commands)
        else:
            state = RobotState(self.state.q, self.state.dq, now)
            torques = self.controller.compute(state, now)
        self.pub_cmd.publish(Float64MultiArray(data=torques.tolist()))
        stamp = time.time_ns()
        if self.pub_pose is not None and self.arm_model is not None:
            self.pub_pose.publish(pose_to_msg(self.arm_model.ee_position(), mat_to_quat(self.arm_model.ee_rotation()),
                                              stamp, self.config.base_frame))
        names, q = self.embodiment.joint_names, self.state.q
        if self.gripper_q is not None:
            names, q = (*names, *self.grippers), np.r_[q, self.gripper_q]
        self.frames.publish(stamp, names, q)
        mode = self.controller.mode.value
        if mode != self._last_mode:
            self._last_mode = mode
            self.pub_mode.publish(String(data=mode))
            self.get_logger().info(f"controller mode {mode}: {self.controller.status.reason}")

    def _diagnose(self, stat: StatusWrapper) -> None:
        status = self.controller.status
        stat.summary(ERROR if status.mode.value == "estop" else OK, f"{status.mode.value}: {status.reason}")


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl controller_node``."""
    return run_node(ControllerNode, args)
