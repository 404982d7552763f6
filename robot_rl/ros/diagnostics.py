"""``/diagnostics`` with diagnostic_updater's semantics, for every node (no diagnostic_updater wheel on PyPI).

An :class:`Updater` holds named tasks; each fills a :class:`StatusWrapper` (level, message, key-values,
hardware id, as ``diagnostic_updater.DiagnosticStatusWrapper``: ``summary``, ``add``) and :meth:`Updater.update`
publishes all of them in one diagnostic_msgs/DiagnosticArray. With a ``period`` the updater runs itself on
a timer of the node's clock; a node that reports on its own schedule (simulated time, a mode change) calls
:meth:`Updater.update` itself, as ``force_update`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from robot_rl.ros.conversions import ns_to_stamp

OK, WARN, ERROR, STALE = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR, DiagnosticStatus.STALE
TOPIC = "/diagnostics"


class StatusWrapper:
    """One task's report under construction: the level and message, then the key-values in order."""

    def __init__(self, name: str, hardware_id: str) -> None:
        self.name, self.hardware_id = name, hardware_id
        self.level: bytes = OK
        self.message = ""
        self.values: list[KeyValue] = []

    def summary(self, level: bytes, message: str) -> None:
        """Set the level (OK, WARN, ERROR, STALE: diagnostic_msgs' byte constants) and the one-line message."""
        self.level, self.message = level, message

    def add(self, key: str, value: object) -> None:
        """Append a key-value (the value as text)."""
        self.values.append(KeyValue(key=key, value=str(value)))

    def status(self) -> DiagnosticStatus:
        """The diagnostic_msgs/DiagnosticStatus."""
        return DiagnosticStatus(level=self.level, name=self.name, message=self.message,
                                hardware_id=self.hardware_id, values=self.values)


Task = Callable[[StatusWrapper], None]
"""Fills one status from the node's state."""


class Updater:
    """Named diagnostic tasks of one node, published together on ``/diagnostics``."""

    def __init__(self, node: Node, hardware_id: str, period: float | None = None,
                 stamp_ns: Callable[[], int] | None = None) -> None:
        """Tasks are added with :meth:`add`.

        ``period`` [s]: publish on a timer of the node's clock (None: only when :meth:`update` is called);
        ``stamp_ns``: the header stamp (default: the node's clock).
        """
        self.node, self.hardware_id = node, hardware_id
        self.stamp_ns = stamp_ns or (lambda: node.get_clock().now().nanoseconds)
        self.tasks: dict[str, Task] = {}
        self.publisher = node.create_publisher(DiagnosticArray, TOPIC, 10)
        self._lock = threading.Lock()  # a bridge reports from its link thread and from the executor
        if period is not None:
            if not period > 0:
                raise ValueError(f"diagnostics period must be positive, got {period}")
            node.create_timer(period, self.update)

    def add(self, name: str, task: Task) -> None:
        """Report ``task`` under ``name`` (a name added again replaces its task)."""
        self.tasks[name] = task

    def remove(self, name: str) -> None:
        """Stop reporting ``name``."""
        self.tasks.pop(name, None)

    def update(self, stamp_ns: int | None = None) -> DiagnosticArray:
        """Run every task now and publish their statuses (stamped ``stamp_ns``, default :attr:`stamp_ns`)."""
        with self._lock:
            array = DiagnosticArray()
            array.header.stamp = ns_to_stamp(self.stamp_ns() if stamp_ns is None else stamp_ns)
            for name, task in list(self.tasks.items()):
                wrapper = StatusWrapper(name, self.hardware_id)
                task(wrapper)
                array.status.append(wrapper.status())
            self.publisher.publish(array)
            return array
