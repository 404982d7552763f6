"""The ROS online graph the tests bring up: sim_arm_policy.launch.yaml with ``learn:=true``.

A keyboard teleop reads a FIFO nobody types on, so control changes only through the teleop node's
services (``~/set_intervention``, ``~/success``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from robot_rl.ros.launch_yaml import load_launch_file


def online_graph(tmp_path: Path, policy: Path, config: dict[str, Any], **extra: str) -> tuple[Any, Path]:
    """(launch description, learner run folder) of the graph acting with ``policy`` and learning with ``config``.

    ``extra``: more launch arguments (e.g. ``learner_connect`` for a policy node that joins over TCP).
    """
    config_path = tmp_path / "online.yaml"
    config_path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    fifo = tmp_path / "tty"
    os.mkfifo(fifo)
    description = load_launch_file("sim_arm_policy.launch.yaml", {
        "policy_path": str(policy), "teleop_device": "keyboard", "teleop_device_path": str(fifo),
        "record": "false", "learn": "true", "learner_run": str(run), "learner_config": str(config_path), **extra})
    return description, run
