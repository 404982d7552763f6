"""A separate process for ROS tests: republishes every JointState from `in` on `out`, unchanged."""

import sys

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState


def main() -> None:
    rclpy.init()
    node = Node("joint_state_echo")
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(JointState, "echo/out", qos)
    node.create_subscription(JointState, "echo/in", pub.publish, qos)
    print("ready", flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
