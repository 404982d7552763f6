"""Safety node: the one e-stop authority of a graph, plus liveness diagnostics.

Services ``~/estop`` and ``~/reset`` (std_srvs/Trigger) set and clear the e-stop; the state goes out
latched on ``safety/estop`` (Bool, transient local), which every node that moves hardware or the
simulator subscribes to (a late joiner still gets the current state). The node watches the freshness of
configured topics and publishes ``/diagnostics`` (:mod:`robot_rl.ros.diagnostics`) once per second;
with ``estop_on_stale`` a watched topic going silent (e.g. ``joint_states`` from a crashed driver)
triggers the e-stop by itself. Reset is refused while a watched topic is stale.

Two gaps are not a driver's fault and do not latch the e-stop (both measured on loaded 2-core machines,
where a graph's processes import torch and compile models at once): a topic that has not yet been alive
for ``arm_after_s`` (bring-up; it is reported as ``starting`` and the bridges' and controllers' own
watchdogs still hold or damp the robot meanwhile), and the safety node's own starvation (its check ran
late, so messages that arrived meanwhile are still queued: a topic not heard from since is judged one max
age after the wake-up, :class:`~robot_rl.control.watchdog.StarvationGuard`).
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robot_rl.control.watchdog import StarvationGuard, Watchdog
from robot_rl.ros.diagnostics import ERROR, OK, STALE, WARN, StatusWrapper, Updater
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
    arm_after_s: float = 2.0
    """A watched topic must have been alive this long without a gap before its silence latches the e-stop."""

    def __post_init__(self) -> None:
        if not (len(self.watched_topics) == len(self.watched_types) == len(self.max_age_s)):
            raise ValueError("watched_topics, watched_types and max_age_s must have the same length")
        if any(a <= 0 for a in self.max_age_s):
            raise ValueError(f"max_age_s must be positive, got {self.max_age_s}")
        if not self.arm_after_s >= 0:
            raise ValueError(f"arm_after_s must be >= 0, got {self.arm_after_s}")


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
        self.alive_since: dict[str, float | None] = dict.fromkeys(cfg.watched_topics)
        """Start of each topic's first unbroken run of messages (None: none yet, or broken during bring-up)."""
        self.starvation = StarvationGuard(min(cfg.max_age_s) / 2)
        """Excuses watched topics after this node's own late check (see :class:`StarvationGuard`)."""
        self.pub_estop = self.create_publisher(Bool, "safety/estop", LATCHED)
        self.diagnostics = Updater(self, "robot_rl", period=1.0 / cfg.diagnostics_hz)
        self.diagnostics.add("robot_rl/safety/estop", self._diagnose_estop)
        for topic in cfg.watched_topics:
            self.diagnostics.add(f"robot_rl/topic/{topic}", functools.partial(self._diagnose_topic, topic=topic))
        for topic, type_name in zip(cfg.watched_topics, cfg.watched_types):
            self.create_subscription(message_type(type_name), topic, self._seen(topic), qos_profile_sensor_data)
        self.create_service(Trigger, "~/estop", self._on_estop)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.create_timer(0.05, self._check)
        self._set(False, "startup")

    def _seen(self, topic: str) -> Callable[[object], None]:
        def callback(_msg: object) -> None:
            now = time.monotonic()
            if self.alive_since[topic] is None:
                self.alive_since[topic] = now
            self.watchdogs[topic].feed(now)
        return callback

    def _stale(self) -> list[str]:
        now = time.monotonic()
        return [t for t, w in self.watchdogs.items()
                if w.went_silent(now) and not self.starvation.excused(w, now)]

    def armed(self, topic: str) -> bool:
        """Whether ``topic`` has been alive long enough that its silence is a fault (not bring-up).

        Once armed, a topic stays armed for the life of the node: after a latched fault and a reset, the
        next silence latches again at once.
        """
        since, last = self.alive_since[topic], self.watchdogs[topic].last
        return since is not None and last is not None and last - since >= self.config.arm_after_s

    def _set(self, estop: bool, reason: str) -> None:
        changed = estop != self.estop or reason == "startup"
        self.estop, self.reason = estop, reason
        self.pub_estop.publish(Bool(data=estop))
        if changed and estop:  # rclpy ties a severity to its call site: one call per severity
            self.get_logger().error(f"e-stop ENGAGED: {reason}")
        elif changed:
            self.get_logger().info(f"e-stop clear: {reason}")

    def _check(self) -> None:
        gap = self.starvation.tick(time.monotonic())
        if gap is not None:  # messages that arrived meanwhile are still queued: give each topic its max age
            self.get_logger().warning(f"safety checks {gap:.3f} s apart (this node was starved): a topic "
                                      f"silent since is judged after its max age", throttle_duration_sec=5.0)
        latching = []
        for topic in self._stale():
            if self.armed(topic):
                latching.append(topic)
            elif self.alive_since[topic] is not None:
                self.alive_since[topic] = None  # bring-up starts over when the topic speaks again
                self.get_logger().warning(f"{topic} went silent during bring-up (alive for less than "
                                          f"{self.config.arm_after_s} s): not latching the e-stop")
        if latching and self.config.estop_on_stale and not self.estop:
            self._set(True, f"stale topic(s): {', '.join(latching)}")

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

    def _diagnose_estop(self, stat: StatusWrapper) -> None:
        stat.summary(ERROR if self.estop else OK, ("ENGAGED: " if self.estop else "clear: ") + self.reason)

    def _diagnose_topic(self, stat: StatusWrapper, *, topic: str) -> None:
        now, watchdog = time.monotonic(), self.watchdogs[topic]
        if not watchdog.fed:
            stat.summary(WARN, "no message yet")
            stat.add("age_s", "inf")
        else:
            stale = watchdog.stale(now)
            stat.summary(STALE if stale else OK, "stale" if stale else "alive" if self.armed(topic) else "starting")
            stat.add("age_s", f"{watchdog.age(now):.3f}")
        stat.add("max_age_s", watchdog.timeout)


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl safety_node``."""
    return run_node(SafetyNode, args)
