"""The one ``main`` every robot_rl node uses: init, spin on the right executor, clean shutdown.

Measured with ROS 2 Kilted's PyPI wheels on a 2-core machine: the MultiThreadedExecutor lost half of a
1 kHz JointState stream, while the single-threaded and events executors kept all of it. Nodes spin
on the SingleThreadedExecutor. rclpy's experimental EventsExecutor uses less CPU but, with Kilted's
wheels here, a node spinning on it ignored SIGINT/SIGTERM and its timers stalled after a few ticks, so
it is opt-in (``ROBOT_RL_EXECUTOR=events``) until that is fixed upstream.

Every node takes ``realtime_priority`` (0: off; 1..98: every thread on SCHED_FIFO at that priority, see
:mod:`robot_rl.ros.realtime`), as ros2_control's ``thread_priority`` does for its control loop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

from robot_rl.ros.realtime import PRIORITY_RANGE, check_priority, use_fifo_scheduling

REALTIME_PRIORITY = "realtime_priority"


def make_executor() -> Any:
    """SingleThreadedExecutor, or the EventsExecutor when ``ROBOT_RL_EXECUTOR=events`` (and available)."""
    if os.environ.get("ROBOT_RL_EXECUTOR", "single") == "events":
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:
            return SingleThreadedExecutor()
        return EventsExecutor()
    return SingleThreadedExecutor()


def run_node(factory: Callable[[], Node], args: Sequence[str] | None = None) -> int:
    """Create the node with ``factory`` and spin it until Ctrl-C or shutdown; returns the exit code.

    Only KeyboardInterrupt and ExternalShutdownException count as a clean stop; any other exception
    propagates so the process exits non-zero (a crashed node must not look healthy to its launcher).
    """
    rclpy.init(args=list(args) if args is not None else sys.argv)
    node = None
    try:
        node = factory()
        apply_realtime_priority(node)
        executor = make_executor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if callable(close):
                close()
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


def apply_realtime_priority(node: Node) -> int:
    """Declare ``realtime_priority`` on ``node`` (if it has not) and apply it; returns the priority asked for.

    A value outside 0 or 1..98 is a ValueError (the node does not start); a priority the system does not
    permit is a warning and the node runs on the normal scheduler.
    """
    if not node.has_parameter(REALTIME_PRIORITY):
        lo, hi = PRIORITY_RANGE
        node.declare_parameter(REALTIME_PRIORITY, 0, ParameterDescriptor(
            description=f"0: normal scheduling; {lo}..{hi}: every thread of this process on SCHED_FIFO"))
    priority = check_priority(node.get_parameter(REALTIME_PRIORITY).value)
    if priority:
        why = use_fifo_scheduling(priority)
        if why is None:
            node.get_logger().info(f"real-time scheduling: SCHED_FIFO {priority}")
        else:
            node.get_logger().warning(f"real-time scheduling refused, running without it: {why}")
    return priority
