"""robot_rl: robot learning on ROS 2.

The package is a pure core (controllers' math, simulation, policies, learners, data; never imports
rclpy) plus a thin ``robot_rl.ros`` layer of nodes that only adapt messages to that core.
"""

__version__ = "0.1.0"
