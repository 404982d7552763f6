"""robot_state_publisher's job, done by the node that owns the robot (sim node, bridge, controller node).

* ``robot_description`` (std_msgs/String, reliable + transient local, as robot_state_publisher publishes it):
  the URDF generated from the robot's MuJoCo model (:mod:`robot_rl.robots.urdf`);
* ``/tf_static`` (tf2_msgs/TFMessage, transient local): the URDF's fixed joints, once (the tool frame of an
  arm, a floating base's ``base_link`` -> body);
* ``/tf``: every moving joint's parent -> child transform at the measured joint positions, and a floating
  base's ``odom`` -> ``base_link`` (REP 105), with the QoS of tf2_ros's broadcasters.

The transforms are the URDF's own forward kinematics, so the chain base -> tool frame is ``current_pose``
and RViz draws the robot from ``robot_description`` alone. PyPI has no tf2_msgs wheel:
``scripts/build_tf2_msgs.sh`` builds the message into a venv; where it is missing, /tf and /tf_static are not
published (said once in the log) and ``robot_description`` still is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from robot_rl.robots.urdf import RobotTree, UrdfJoint, moving_poses, robot_tree
from robot_rl.ros.conversions import ns_to_stamp
from robot_rl.ros.odometry import ODOM_FRAME
from robot_rl.ros.qos import LATCHED

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # a venv of PyPI wheels without scripts/build_tf2_msgs.sh
    TFMessage = None

DESCRIPTION_TOPIC = "robot_description"
TF_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
"""tf2_ros.TransformBroadcaster's QoS."""
TF_STATIC_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""tf2_ros.StaticTransformBroadcaster's QoS: a late listener still gets the fixed frames."""


def transform_msg(parent: str, child: str, pos: np.ndarray, quat: np.ndarray, stamp_ns: int) -> TransformStamped:
    """A geometry_msgs/TransformStamped of ``child`` in ``parent`` (quaternion w, x, y, z)."""
    msg = TransformStamped()
    msg.header.stamp, msg.header.frame_id, msg.child_frame_id = ns_to_stamp(stamp_ns), parent, child
    t, r = msg.transform.translation, msg.transform.rotation
    t.x, t.y, t.z = (float(v) for v in pos)
    r.w, r.x, r.y, r.z = (float(v) for v in quat)
    return msg


class RobotStatePublisher:
    """Publishes one robot's description and frames from ``node``; :meth:`publish` sends the moving ones."""

    def __init__(self, node: Node, robot: str, model: mujoco.MjModel | None = None, root: str | None = None,
                 odom_frame: str = ODOM_FRAME, max_rate_hz: float = 100.0, stamp_ns: int = 0) -> None:
        """Publish the description and the fixed frames now.

        ``model``: a compiled model holding the robot (the sim's scene; default: the robot's own); ``root``:
        name of a fixed base's root link (the frame of current_pose); ``max_rate_hz``: /tf at most this often
        (a 500 Hz control loop need not flood it).
        """
        self.tree: RobotTree = robot_tree(robot, model, root)
        self.odom_frame = odom_frame
        self.min_period_ns = round(1e9 / max_rate_hz)
        self._last_ns: int | None = None
        self._names: tuple[str, ...] | None = None
        self._joints: list[UrdfJoint] = []
        self._index = np.zeros(0, dtype=np.intp)
        self._msgs: dict[str, TransformStamped] = {}
        node.create_publisher(String, DESCRIPTION_TOPIC, LATCHED).publish(String(data=self.tree.urdf))
        self.pub_tf: Any = None
        if TFMessage is None:
            node.get_logger().info("tf2_msgs is not installed (scripts/build_tf2_msgs.sh builds it): not "
                                   "publishing /tf and /tf_static")
            return
        self.pub_tf = node.create_publisher(TFMessage, "/tf", TF_QOS)
        static = [transform_msg(j.parent, j.child, p, q, stamp_ns) for j, p, q in self.tree.transforms({}, fixed=True)]
        node.create_publisher(TFMessage, "/tf_static", TF_STATIC_QOS).publish(TFMessage(transforms=static))

    def transforms(self, stamp_ns: int, names: Sequence[str], q: Sequence[float] | np.ndarray,
                   base: tuple[np.ndarray, np.ndarray] | None = None) -> list[TransformStamped]:
        """The moving frames: the joints ``names`` at positions ``q``, and odom -> root at the ``base`` pose.

        The messages are kept and refilled (building ~30 of them anew cost a G1 bridge ~0.7 ms per state).
        """
        key = tuple(names)
        if key != self._names:
            position = dict(zip(names, range(len(names))))
            self._joints = [j for j in self.tree.moving if j.name in position]
            self._index = np.array([position[j.name] for j in self._joints], dtype=np.intp)
            self._msgs = {j.child: transform_msg(j.parent, j.child, np.zeros(3), np.array([1.0, 0, 0, 0]), 0)
                          for j in self._joints}
            self._names = key
        stamp = ns_to_stamp(stamp_ns)
        out = []
        if base is not None:
            out.append(transform_msg(self.odom_frame, self.tree.root, base[0], base[1], stamp_ns))
        pos, quat = moving_poses(self._joints, np.asarray(q, dtype=np.float64)[self._index])
        for joint, p, r in zip(self._joints, pos.tolist(), quat.tolist()):
            msg = self._msgs[joint.child]
            msg.header.stamp = stamp
            t, o = msg.transform.translation, msg.transform.rotation
            t.x, t.y, t.z = p
            o.w, o.x, o.y, o.z = r
            out.append(msg)
        return out

    def publish(self, stamp_ns: int, names: Sequence[str], q: Sequence[float] | np.ndarray,
                base: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Send /tf for joint positions ``q`` of joints ``names`` and a floating ``base`` (position, quat).

        Skipped within ``1 / max_rate_hz`` of the last one sent (a stamp going back, a reset, sends).
        """
        last = self._last_ns
        if last is not None and 0 <= stamp_ns - last < self.min_period_ns:
            return
        self._last_ns = stamp_ns
        if self.pub_tf is not None:
            self.pub_tf.publish(TFMessage(transforms=self.transforms(stamp_ns, names, q, base)))
