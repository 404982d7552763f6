"""Bring up a ROS 2 graph from a YAML launch file without ``ros2 launch`` (pip-only installs, CI).

The file is read exactly as ``ros2 launch robot_rl <file>`` would read it; Ctrl-C stops every process.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
from pathlib import Path

HELP = "run a YAML launch file's ROS 2 graph (no ros2 launch needed)"
EXAMPLES = """\
robot-rl launch sim_arm_teleop.launch.yaml use_sim_time:=true
robot-rl launch humanoid_real.launch.yaml emulate:=true --print   # show the resolved commands only
robot-rl launch sim_arm_policy.launch.yaml policy_path:=runs/bc/policy learner_run:=runs/ros_online \\
    learn:=true demos:=data/pick.zarr    # the online loop on the graph
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``robot-rl launch``."""
    parser.add_argument("file", help="launch file path, or a file name in robot_rl's launch/ folder")
    parser.add_argument("arguments", nargs="*", help="launch arguments as name:=value")
    parser.add_argument("--print", action="store_true", help="print the resolved processes and exit")
    parser.add_argument("--log-dir", default=None, help="folder for per-process logs (default: a temp folder)")


def run(args: argparse.Namespace) -> int:
    """Resolve the file, start the processes, wait for Ctrl-C or for the graph to end."""
    import yaml

    from robot_rl.ros.isolation import isolated_ros_env
    from robot_rl.ros.launch_processes import LaunchedGraph
    from robot_rl.ros.launch_yaml import load_launch_file, parse_launch_arguments

    try:  # LaunchError is a ValueError; a file that is not UTF-8 YAML fails in the parser
        description = load_launch_file(args.file, parse_launch_arguments(args.arguments))
    except (ValueError, yaml.YAMLError) as exc:
        print(f"robot-rl launch: error: {args.file}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.print:
        for name, value in description.arguments.items():
            print(f"arg {name} = {value}")
        for spec in description.processes:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items())
            print(f"{spec.name}: {env + ' ' if env else ''}{shlex.join(spec.cmd)}")
        return 0
    import os

    os.environ.setdefault("ROS_LOG_DIR", isolated_ros_env()["ROS_LOG_DIR"])
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="robot_rl_launch_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    graph = LaunchedGraph(description, log_dir, echo=True).start()
    print(f"[launch] {len(graph.names)} processes, logs in {log_dir}")
    signal.signal(signal.SIGTERM, lambda *_: graph.shutdown())
    try:
        graph.wait()
    except KeyboardInterrupt:
        print("[launch] stopping")
    codes = graph.shutdown()
    failed = {n: c for n, c in codes.items() if c not in (0, -signal.SIGINT, None)}
    return 1 if failed else 0
