"""What a graph test reads of the ROS conventions: robot_description, /tf + /tf_static, odometry, the topics.

A :class:`FramesProbe` subscribes on a probe node as RViz and tf2 would (the same QoS); its checks compose
transforms along the tree at one stamp, the way tf2's lookupTransform does. :func:`undocumented_topics` holds a
live graph against the documented table (:mod:`robot_rl.ros.topics`).
"""

from __future__ import annotations

import importlib.util
from collections import deque
from xml.etree import ElementTree as ET

import mujoco
import numpy as np
from nav_msgs.msg import Odometry
from rclpy.node import Node
from std_msgs.msg import String

from robot_rl.ros.conversions import stamp_to_ns
from robot_rl.ros.qos import LATCHED
from robot_rl.ros.robot_state import TF_QOS, TF_STATIC_QOS, TFMessage
from robot_rl.ros.topics import INFRASTRUCTURE, find

HAS_TF = TFMessage is not None
"""tf2_msgs is installed (scripts/build_tf2_msgs.sh): the /tf checks run."""

Pose = tuple[np.ndarray, np.ndarray]


def urdf_joint_names(text: str) -> list[str]:
    """Joint names of a URDF, parsed by urdf_parser_py when installed (what robot_state_publisher reads)."""
    if importlib.util.find_spec("urdf_parser_py") is not None:
        from urdf_parser_py.urdf import URDF

        return [j.name for j in URDF.from_xml_string(text).joints]
    return [j.get("name", "") for j in ET.fromstring(text).iter("joint")]


class FramesProbe:
    """Collects robot_description, odometry and the transforms a graph publishes."""

    def __init__(self, node: Node, odometry: bool = False, keep: int = 400) -> None:
        self.description: str | None = None
        self.odometry: deque[Odometry] = deque(maxlen=keep)
        self.first_odometry: Odometry | None = None
        self.tf: dict[tuple[int, str], tuple[str, Pose]] = {}
        """(stamp ns, child) -> (parent, pose) of every /tf transform received (bounded)."""
        self.static: dict[str, tuple[str, Pose]] = {}
        self._order: deque[tuple[int, str]] = deque()
        self.keep = keep * 40
        node.create_subscription(String, "/robot_description", self._on_description, LATCHED)
        if odometry:
            node.create_subscription(Odometry, "/odom", self._on_odometry, 10)
        if HAS_TF:
            node.create_subscription(TFMessage, "/tf", self._on_tf, TF_QOS)
            node.create_subscription(TFMessage, "/tf_static", lambda m: self._on_tf(m, static=True), TF_STATIC_QOS)

    def _on_odometry(self, msg: Odometry) -> None:
        self.first_odometry = self.first_odometry or msg
        self.odometry.append(msg)

    def _on_description(self, msg: String) -> None:
        self.description = msg.data

    def _on_tf(self, msg: TFMessage, static: bool = False) -> None:
        for t in msg.transforms:
            tr, r = t.transform.translation, t.transform.rotation
            entry = (t.header.frame_id, (np.array([tr.x, tr.y, tr.z]), np.array([r.w, r.x, r.y, r.z])))
            if static:
                self.static[t.child_frame_id] = entry
                continue
            key = (stamp_to_ns(t.header.stamp), t.child_frame_id)
            self.tf[key] = entry
            self._order.append(key)
            if len(self._order) > self.keep:
                self.tf.pop(self._order.popleft(), None)

    def ready(self) -> bool:
        """Description, and (with tf2_msgs) static and moving transforms, have arrived."""
        return self.description is not None and (not HAS_TF or (bool(self.static) and bool(self.tf)))

    def stamps(self, child: str) -> list[int]:
        """Stamps at which ``child`` moved on /tf."""
        return sorted(s for s, c in self.tf if c == child)

    def lookup(self, target: str, source: str, stamp_ns: int) -> Pose:
        """Pose of frame ``source`` in frame ``target`` at ``stamp_ns``, composed along the tree.

        Raises:
            KeyError: when a frame on the way has no transform at that stamp.
        """
        pos, quat = np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0])
        frame = source
        while frame != target:
            parent, (p, q) = self.static[frame] if frame in self.static else self.tf[(stamp_ns, frame)]
            new_pos, new_quat = np.zeros(3), np.zeros(4)
            mujoco.mju_mulPose(new_pos, new_quat, p, q, pos, quat)
            pos, quat, frame = new_pos, new_quat, parent
        return pos, quat


def same_rotation(a: np.ndarray, b: np.ndarray, tol: float = 1e-6) -> bool:
    """Whether two unit quaternions are the same rotation (q and -q are)."""
    return abs(abs(float(np.dot(a, b))) - 1.0) < tol


def undocumented_topics(node: Node) -> list[str]:
    """Topics on the live graph that :data:`robot_rl.ros.topics.TOPICS` lacks, or documents with another type."""
    out = []
    for name, types in node.get_topic_names_and_types():
        topic = find(name)
        if name not in INFRASTRUCTURE and (topic is None or topic.type not in types):
            out.append(f"{name} {types}")
    return out
