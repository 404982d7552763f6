"""The ROS 2 layer: thin nodes that adapt messages to the pure core.

Only modules in this package import rclpy or ROS message types. Importing this package itself does
not import rclpy, so helpers such as :mod:`robot_rl.ros.isolation` work without a ROS install.
"""
