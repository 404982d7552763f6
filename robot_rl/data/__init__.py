"""Datasets: a crash-safe zarr episode store, statistics, LeRobot v3 export/import, rosbag2 import.

Nothing here imports rclpy; bags are read with the pure-Python ``rosbags`` library.
"""

from __future__ import annotations

from robot_rl.data.schema import DatasetError, DatasetInfo, StepSchema
from robot_rl.data.store import EpisodeInfo, EpisodeStore
from robot_rl.data.writer import EpisodeWriter

__all__ = ["DatasetError", "DatasetInfo", "EpisodeInfo", "EpisodeStore", "EpisodeWriter", "StepSchema"]
