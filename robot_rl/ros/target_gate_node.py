"""Target gate: one arbitrated, checked target stream for CRISP's C++ controllers.

CRISP ignores ``target_pose`` as soon as two nodes publish on it, and keeps tracking its last target
forever when the stream stops. With a policy and a human both able to command the arm, robot_rl
therefore puts this gate in front of CRISP: the policy publishes on ``policy/target_pose``, the teleop
node on ``teleop/target_pose``, and the gate alone publishes CRISP's ``target_pose`` at ``rate_hz``
(latched re-publishing, as crisp_py does). It forwards the human's target while the latched
``intervention`` flag is set and the policy's otherwise, refuses NaN / non-unit / out-of-workspace
targets (the last good one stays; the box is ``safety.workspace_low/high`` of ``controllers/<robot>.yaml``,
the one the safety layer and the envs use, checked by the same :func:`check_pose_target`), and holds the
measured ``current_pose`` when the source goes stale (``watchdog_timeout_s``, the same :class:`Watchdog`)
or ``safety/estop`` is engaged. The gripper target is forwarded the same way.

The gate cannot cut motor power: on real hardware the robot's own e-stop button stays the e-stop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import Bool, Float64, String

from robot_rl.control.base import TargetRejected
from robot_rl.control.config import load_control_config
from robot_rl.control.targets import PoseTarget
from robot_rl.control.watchdog import Watchdog, check_pose_target
from robot_rl.core.spaces import SpecError
from robot_rl.robots import DESCRIPTIONS
from robot_rl.ros.conversions import pose_from_msg, pose_to_msg
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED, RateLimitedWarnings


@dataclass(frozen=True)
class TargetGateConfig:
    """Target gate parameters."""

    robot: str = "panda"
    """Robot whose ``controllers/<robot>.yaml`` safety box bounds the targets."""
    rate_hz: float = 50.0
    """Rate at which CRISP's target_pose is (re-)published."""
    watchdog_timeout_s: float = 0.5
    """A source silent for longer than this is stale: the gate holds the measured pose."""
    base_frame: str = "base"
    """Frame of all poses."""

    def __post_init__(self) -> None:
        if self.robot not in DESCRIPTIONS:
            raise ValueError(f"robot must be one of {sorted(DESCRIPTIONS)}, got {self.robot!r}")
        if not 1 <= self.rate_hz <= 1000 or self.watchdog_timeout_s <= 0:
            raise ValueError("rate_hz must be in [1, 1000] and watchdog_timeout_s positive")


class TargetGateNode(Node):
    """Arbitrates policy and human targets into CRISP's single target stream."""

    def __init__(self) -> None:
        super().__init__("target_gate")
        cfg = self.config = declare_config(self, TargetGateConfig)
        self.box = load_control_config(cfg.robot).safety.workspace
        self.targets: dict[str, PoseTarget | None] = {"policy": None, "human": None}
        self.watchdogs = {s: Watchdog(cfg.watchdog_timeout_s) for s in self.targets}
        self.grippers: dict[str, float | None] = {"policy": None, "human": None}
        self.current: tuple[np.ndarray, np.ndarray] | None = None
        self.hold: tuple[np.ndarray, np.ndarray] | None = None
        self.human = False
        self.estop = False
        self.state = ""
        self._warn = RateLimitedWarnings(self.get_logger())
        self.create_subscription(PoseStamped, "policy/target_pose", lambda m: self._on_target(m, "policy"), 10)
        self.create_subscription(PoseStamped, "teleop/target_pose", lambda m: self._on_target(m, "human"), 10)
        self.create_subscription(Float64, "policy/target_gripper", lambda m: self._on_gripper(m, "policy"), 10)
        self.create_subscription(Float64, "teleop/gripper", lambda m: self._on_gripper(m, "human"), 10)
        self.create_subscription(PoseStamped, "current_pose", self._on_current, qos_profile_sensor_data)
        self.create_subscription(Bool, "intervention", self._on_intervention, LATCHED)
        self.create_subscription(Bool, "safety/estop", self._on_estop, LATCHED)
        self.pub_target = self.create_publisher(PoseStamped, "target_pose", 10)
        self.pub_gripper = self.create_publisher(Float64, "target_gripper", 10)
        self.pub_state = self.create_publisher(String, "target_gate/state", LATCHED)
        self.create_timer(1.0 / cfg.rate_hz, self._tick)


    def _on_target(self, msg: PoseStamped, source: str) -> None:
        try:
            target = check_pose_target(PoseTarget(*pose_from_msg(msg, self.config.base_frame)), self.box)
        except (SpecError, TargetRejected) as exc:
            self._warn(f"rejected {source} target: {exc}")
            return
        self.targets[source] = target
        self.watchdogs[source].feed(time.monotonic())

    def _on_gripper(self, msg: Float64, source: str) -> None:
        if np.isfinite(msg.data):
            self.grippers[source] = float(np.clip(msg.data, 0.0, 1.0))

    def _on_current(self, msg: PoseStamped) -> None:
        try:
            self.current = pose_from_msg(msg)
        except SpecError as exc:
            self._warn(f"ignoring current_pose: {exc}")

    def _on_intervention(self, msg: Bool) -> None:
        if bool(msg.data) != self.human:
            self.human = bool(msg.data)
            new = "human" if self.human else "policy"
            self.targets[new] = None  # the new source must speak first
            self.watchdogs[new].clear()

    def _on_estop(self, msg: Bool) -> None:
        self.estop = bool(msg.data)

    def _tick(self) -> None:
        source = "human" if self.human else "policy"
        target = self.targets[source]
        if self.estop or target is None or self.watchdogs[source].stale(time.monotonic()):
            state = "estop" if self.estop else f"hold ({source} stale)"
            if self.hold is None and self.current is not None:
                self.hold = self.current  # freeze where the arm is now, not where it drifts to
            pose = self.hold
        else:
            assert target is not None
            state, pose, self.hold = f"forwarding {source}", (target.position, target.quat), None
        if state != self.state:
            self.state = state
            self.pub_state.publish(String(data=state))
            self.get_logger().info(f"gate: {state}")
        if pose is None:
            return  # nothing measured yet: publish nothing (CRISP holds its activation pose)
        self.pub_target.publish(pose_to_msg(pose[0], pose[1], self.get_clock().now().nanoseconds,
                                            self.config.base_frame))
        gripper = self.grippers[source]
        if gripper is not None and not self.estop:
            self.pub_gripper.publish(Float64(data=gripper))


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl target_gate_node``."""
    return run_node(TargetGateNode, args)
