"""Floating-base odometry (humanoid pelvis, quadrotor body) as one nav_msgs/Odometry, REP 105's way.

``odom`` (nav_msgs/Odometry): ``header.frame_id`` = ``odom`` (world-fixed), ``child_frame_id`` = ``base_link``;
the pose is the base's position [m] and orientation in the odom frame, the twist its linear [m/s] and angular
[rad/s] velocity in the CHILD frame (the body), as nav_msgs specifies; covariances are left at zero (unknown).
The node that publishes it also broadcasts the same pose as the odom -> base_link transform
(:mod:`robot_rl.ros.robot_state`), so nav2, RViz and the policy node read one source.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import Twist, TwistStamped
from nav_msgs.msg import Odometry

from robot_rl.control.base import RobotState
from robot_rl.control.rotations import quat_to_mat
from robot_rl.core.spaces import SpecError
from robot_rl.ros.conversions import ns_to_stamp, pose_values

ODOM_TOPIC = "odom"
ODOM_FRAME = "odom"
"""REP 105's world-fixed frame of odometry."""
BASE_LINK = "base_link"
"""REP 105's frame rigidly attached to the base (the URDF's root link of a floating base)."""


def odometry_to_msg(state: RobotState, stamp_ns: int, frame: str = ODOM_FRAME, child: str = BASE_LINK) -> Odometry:
    """A floating-base state (world pose, world linear velocity, body rates) -> nav_msgs/Odometry.

    Raises:
        ValueError: for a state without its floating base.
    """
    if state.base_pos is None or state.base_quat is None or state.base_linvel is None or state.base_angvel is None:
        raise ValueError("odometry: the state has no floating base")
    msg = Odometry()
    msg.header.stamp = ns_to_stamp(stamp_ns)
    msg.header.frame_id, msg.child_frame_id = frame, child
    pose = msg.pose.pose
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in state.base_pos)
    pose.orientation.w, pose.orientation.x, pose.orientation.y, pose.orientation.z = (float(v) for v in state.base_quat)
    v = quat_to_mat(state.base_quat).T @ state.base_linvel  # world -> body: nav_msgs' twist is in the child frame
    twist = msg.twist.twist
    twist.linear.x, twist.linear.y, twist.linear.z = (float(x) for x in v)
    twist.angular.x, twist.angular.y, twist.angular.z = (float(x) for x in state.base_angvel)
    return msg


def odometry_from_msg(msg: Odometry) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(position, unit quaternion w x y z, body linear velocity, body angular velocity) of an Odometry.

    Raises:
        SpecError: for non-finite values (or beyond float32's range) or an orientation that is no rotation.
    """
    position, quat = pose_values(msg.pose.pose, "Odometry")
    linear, angular = _twist_values(msg.twist.twist, "Odometry twist")
    return position, quat, linear, angular


def twist_from_msg(msg: TwistStamped) -> tuple[np.ndarray, np.ndarray]:
    """(linear, angular) velocity of a TwistStamped as float64 vectors; SpecError when not finite."""
    return _twist_values(msg.twist, "twist")


def _twist_values(twist: Twist, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Values beyond float32's range count as infinite: policies read them as float32 (1e39 would be inf)."""
    lin, ang = twist.linear, twist.angular
    v, w = np.array([lin.x, lin.y, lin.z]), np.array([ang.x, ang.y, ang.z])
    if not np.all(np.abs(np.r_[v, w]) <= np.finfo(np.float32).max):
        raise SpecError(f"{what}: contains NaN or inf (or values beyond float32's range)")
    return v, w
