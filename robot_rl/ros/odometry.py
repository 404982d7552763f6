"""Floating-base odometry (humanoid pelvis, quadrotor body) as two standard messages.

``odom/pose`` (geometry_msgs/PoseStamped): base position [m] and orientation in the world frame;
``odom/twist`` (geometry_msgs/TwistStamped): linear [m/s] and angular [rad/s] velocity in the BODY frame
(``header.frame_id`` = the base body), the convention of nav_msgs/Odometry's twist. They are the two
halves of a nav_msgs/Odometry, split because nav_msgs is not among the installed message wheels; a
hardware bridge (state estimator, motion-capture relay) publishes the same pair.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped

from robot_rl.control.base import RobotState
from robot_rl.control.rotations import quat_to_mat
from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import ns_to_stamp, pose_to_msg

POSE_TOPIC = "odom/pose"
TWIST_TOPIC = "odom/twist"


def odometry_to_msgs(state: RobotState, stamp_ns: int, frame: str, body: str) -> tuple[PoseStamped, TwistStamped]:
    """A floating-base state (world pose, world linear velocity, body rates) -> the two messages.

    Raises:
        ValueError: for a state without its floating base.
    """
    if state.base_pos is None or state.base_quat is None or state.base_linvel is None or state.base_angvel is None:
        raise ValueError("odometry: the state has no floating base")
    twist = TwistStamped()
    twist.header.stamp = ns_to_stamp(stamp_ns)
    twist.header.frame_id = body
    v = quat_to_mat(state.base_quat).T @ state.base_linvel
    twist.twist.linear.x, twist.twist.linear.y, twist.twist.linear.z = (float(x) for x in v)
    twist.twist.angular.x, twist.twist.angular.y, twist.twist.angular.z = (float(x) for x in state.base_angvel)
    return pose_to_msg(state.base_pos, state.base_quat, stamp_ns, frame), twist


def twist_from_msg(msg: TwistStamped) -> tuple[np.ndarray, np.ndarray]:
    """(linear, angular) velocity of a TwistStamped as float64 vectors; SpecError when not finite.

    Values beyond float32's range count as infinite: policies read them as float32 (1e39 would be inf).
    """
    lin, ang = msg.twist.linear, msg.twist.angular
    v, w = np.array([lin.x, lin.y, lin.z]), np.array([ang.x, ang.y, ang.z])
    if not np.all(np.abs(np.r_[v, w]) <= np.finfo(np.float32).max):
        raise SpecError("twist: contains NaN or inf (or values beyond float32's range)")
    return v, w
