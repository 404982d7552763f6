"""`ros2 launch robot_rl quadrotor_real.launch.py [emulate:=true]`: the graph of quadrotor_real.launch.yaml."""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import AnyLaunchDescriptionSource


def generate_launch_description() -> LaunchDescription:
    yaml_file = os.path.join(get_package_share_directory("robot_rl"), "launch", "quadrotor_real.launch.yaml")
    return LaunchDescription([IncludeLaunchDescription(AnyLaunchDescriptionSource(yaml_file))])
