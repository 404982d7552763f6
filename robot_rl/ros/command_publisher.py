"""Controller targets -> the command topics the sim node, the target gate and hardware bridges accept.

PoseTarget -> ``target_pose`` (PoseStamped), JointTarget -> ``target_joint`` (JointState with the robot's
joint names, CRISP's topic), BodyRateTarget -> ``target_body_rates`` (TwistStamped: angular = body rates
[rad/s], linear.z = collective thrust [N]; see :mod:`robot_rl.ros.target_conversions`), gripper opening ->
``target_gripper`` (Float64, 0 closed .. 1 open). Only the topic of the node's control mode is advertised,
so an arm graph never shows a flight command publisher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from geometry_msgs.msg import PoseStamped, TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64

from robot_rl.control.targets import BodyRateTarget, JointTarget, PoseTarget
from robot_rl.core import ControlMode
from robot_rl.ros.conversions import joint_state_to_msg, ns_to_stamp, pose_to_msg
from robot_rl.runtime.actions import Command

TOPICS: dict[ControlMode, tuple[str, Any]] = {
    ControlMode.CARTESIAN_DELTA: ("target_pose", PoseStamped),
    ControlMode.CARTESIAN_POSE: ("target_pose", PoseStamped),
    ControlMode.JOINT_POSITION: ("target_joint", JointState),
    ControlMode.THRUST_BODY_RATES: ("target_body_rates", TwistStamped),
}
"""Control mode -> its command topic and message type."""


def body_rates_to_msg(target: BodyRateTarget, stamp_ns: int, frame_id: str) -> TwistStamped:
    """BodyRateTarget -> TwistStamped (inverse of ``target_conversions.body_rate_target_from_msg``)."""
    msg = TwistStamped()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id = frame_id
    msg.twist.linear.z = float(target.thrust)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(v) for v in target.rates)
    return msg


class CommandPublisher:
    """Publishes a :class:`~robot_rl.runtime.actions.Command` on the topics of one control mode."""

    def __init__(self, node: Node, mode: ControlMode, joint_names: Sequence[str], gripper: bool, frame: str) -> None:
        topic, msg_type = TOPICS[mode]
        self.node, self.joint_names, self.frame = node, list(joint_names), frame
        self.topic = topic
        self.pub = node.create_publisher(msg_type, topic, 10)
        self.pub_gripper = node.create_publisher(Float64, "target_gripper", 10) if gripper else None

    def publish(self, command: Command, target_only: bool = False) -> None:
        """Stamp with the node's clock and publish (``target_only``: skip the gripper, e.g. when holding)."""
        stamp = self.node.get_clock().now().nanoseconds
        target = command.target
        if isinstance(target, PoseTarget):
            self.pub.publish(pose_to_msg(target.position, target.quat, stamp, self.frame))
        elif isinstance(target, JointTarget):
            self.pub.publish(joint_state_to_msg(self.joint_names, target.q, None, None, stamp, self.frame))
        else:
            self.pub.publish(body_rates_to_msg(target, stamp, self.frame))
        if self.pub_gripper is not None and command.gripper is not None and not target_only:
            self.pub_gripper.publish(Float64(data=float(command.gripper)))
