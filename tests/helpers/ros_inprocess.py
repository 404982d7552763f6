"""Driving a node built in the test's own process: its subscriptions and publishers, without DDS timing.

A test calls the node's subscription callbacks (as the executor would on a message) and its timer methods
directly, and captures what it publishes, so the node's logic is checked deterministically and fast.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import rclpy
from rclpy.node import Node


@contextmanager
def ros_context(args: Sequence[str] | None = None) -> Iterator[None]:
    """rclpy initialised for a block; ``args`` (``["--ros-args", "-p", "name:=value"]``) set every node's parameters."""
    rclpy.init(args=list(args) if args is not None else None)
    try:
        yield
    finally:
        rclpy.try_shutdown()


def capture(publisher: Any) -> list[Any]:
    """Messages ``publisher`` publishes from now on, kept in a list instead of sent."""
    sent: list[Any] = []
    publisher.publish = sent.append
    return sent


def deliver(node: Node, topic: str, msg: Any) -> None:
    """Hand ``msg`` to the node's one subscription of ``topic`` (fully qualified, e.g. ``/joint_states``)."""
    (sub,) = [s for s in node.subscriptions if s.topic_name == topic]
    callback: Any = sub.callback
    callback(msg)
