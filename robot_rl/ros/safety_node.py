"""Safety node: the one e-stop authority of a graph, plus liveness diagnostics.

Services ``~/estop`` and ``~/reset`` (std_srvs/Trigger) set and clear the e-stop; the state goes out
latched on ``safety/estop`` (Bool, transient local), which every node that moves hardware or the
simulator subscribes to (a late joiner still gets the current state). The node watches the freshness of
configured topics and publishes ``/diagnostics`` (diagnostic_msgs/DiagnosticArray) once per second;
with ``estop_on_stale`` a watched topic going silent (e.g. ``joint_states`` from a crashed driver)
triggers the e-stop by itself. Reset is refused while a watched topic is stale.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robot_rl.control.watchdog import Watchdog
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED


@dataclass(frozen=True)
class SafetyNodeConfig:
    """Safety node parameters."""

    watched_topics: tuple[str, ...] = ("joint_states",)
    """Topics whose silence is a fault."""
    watched_types: tuple[str, ...] = ("sensor_msgs/msg/JointState",)
    """Message type of each watched topic (``pkg/msg/Type``)."""
    max_age_s: tuple[float, ...] = (0.5,)
    """Longest allowed gap between two messages on each watched topic [s]."""
    estop_on_stale: bool = True
    """Trigger the e-stop when a watched topic that was alive goes stale."""
    diagnostics_hz: float = 1.0
    """Rate of /diagnostics."""

    def __post_init__(self) -> None:
        if not (len(self.watched_topics) == len(self.watched_types) == len(self.max_age_s)):
            raise ValueError("watched_topics, watched_types and max_age_s must have the same length")
        if any(a <= 0 for a in self.max_age_s):
            raise ValueError(f"max_age_s must be positive, got {self.max_age_s}")


def message_type(name: str) -> type:
    """The message class for ``pkg/msg/Type``."""
    parts = name.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ValueError(f"message type must look like pkg/msg/Type, got {name!r}")
    cls: type = getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    return cls


class SafetyNode(Node):
    """Owns the e-stop state and reports liveness."""

    def __init__(self) -> None:
        super().__init__("safety")
        cfg = self.config = declare_config(self, SafetyNodeConfig)
        self.estop = False
        self.reason = "startup"
        self.watchdogs = {t: Watchdog(age) for t, age in zip(cfg.watched_topics, cfg.max_age_s)}
        """One per watched topic, fed with the monotonic time of each message."""
        self.pub_estop = self.create_publisher(Bool, "safety/estop", LATCHED)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        for topic, type_name in zip(cfg.watched_topics, cfg.watched_types):
            self.create_subscription(message_type(type_name), topic, self._seen(topic), qos_profile_sensor_data)
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_timer(0.05, self._check)
        self.create_timer(1.0 / cfg.diagnostics_hz, self._publish_diagnostics)
        self._set(False, "startup")

    def _seen(self, topic: str) -> Callable[[object], None]:
        def callback(_msg: object) -> None:
            self.watchdogs[topic].feed(time.monotonic())
        return callback

    def _stale(self) -> list[str]:
        now = time.monotonic()
        return [t for t, w in self.watchdogs.items() if w.went_silent(now)]

    def _set(self, estop: bool, reason: str) -> None:
        changed = estop != self.estop or reason == "startup"
        self.estop, self.reason = estop, reason
        self.pub_estop.publish(Bool(data=estop))
        if changed and estop:  # rclpy ties a severity to its call site: one call per severity
            self.get_logger().error(f"e-stop ENGAGED: {reason}")
        elif changed:
            self.get_logger().info(f"e-stop clear: {reason}")

    def _check(self) -> None:
        stale = self._stale()
        if stale and self.config.estop_on_stale and not self.estop:
            self._set(True, f"stale topic(s): {', '.join(stale)}")

    def _on_estop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self._set(True, "e-stop service")
        response.success, response.message = True, "e-stop engaged"
        return response

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        stale = self._stale()
        if stale:
            response.success, response.message = False, f"refused: stale topic(s) {', '.join(stale)}"
            return response
        self._set(False, "reset service")
        response.success, response.message = True, "e-stop cleared"
        return response

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        status = DiagnosticStatus(name="robot_rl/safety/estop", hardware_id="robot_rl",
                                  level=DiagnosticStatus.ERROR if self.estop else DiagnosticStatus.OK,
                                  message=("ENGAGED: " if self.estop else "clear: ") + self.reason)
        array.status.append(status)
        for topic, watchdog in self.watchdogs.items():
            max_age = watchdog.timeout
            if not watchdog.fed:
                level, message, age = DiagnosticStatus.WARN, "no message yet", "inf"
            else:
                stale = watchdog.stale(now)
                level = DiagnosticStatus.STALE if stale else DiagnosticStatus.OK
                message, age = ("stale" if stale else "alive"), f"{watchdog.age(now):.3f}"
            array.status.append(DiagnosticStatus(name=f"robot_rl/topic/{topic}", hardware_id="robot_rl",
                                                 level=level, message=message,
                                                 values=[KeyValue(key="age_s", value=age),
                                                         KeyValue(key="max_age_s", value=str(max_age))]))
        self.pub_diag.publish(array)


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl safety_node``."""
    return run_node(SafetyNode, args)
