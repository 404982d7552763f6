"""Who commands a vendor bridge right now: the policy, or the human while ``intervention`` is true.

In simulation and behind robot_rl's controller node the safety layer arbitrates (a human target overrides
the policy's while the latched ``intervention`` flag is set). A vendor bridge (PX4, Crazyflie) forwards
setpoints straight to the vehicle's own autopilot, so it arbitrates here, with the same semantics: while
the human holds the intervention only ``teleop/*`` commands pass, otherwise only the policy's; the other
source's commands are dropped and counted, never queued. Taking over therefore never mixes two streams,
and releasing hands the very next policy command through.
"""

from __future__ import annotations

from collections.abc import Callable

from rclpy.node import Node
from std_msgs.msg import Bool

from robot_rl.ros.qos import LATCHED

SOURCES = ("policy", "human")


class InterventionGate:
    """Subscribes the latched ``intervention`` flag; :meth:`admits` says whether a source's command passes."""

    def __init__(self, node: Node, log: Callable[[str], object] | None = None) -> None:
        self.human = False
        self.dropped = dict.fromkeys(SOURCES, 0)
        self._log = log or (lambda text: node.get_logger().info(text))
        node.create_subscription(Bool, "intervention", self._on_flag, LATCHED)

    def _on_flag(self, msg: Bool) -> None:
        if bool(msg.data) != self.human:
            self.human = bool(msg.data)
            self._log("intervention: the human commands (teleop/*); policy commands dropped" if self.human
                      else "intervention released: the policy commands")

    def admits(self, source: str) -> bool:
        """True when ``source`` ("policy" | "human") is the one in control; counts the drop otherwise."""
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if (source == "human") == self.human:
            return True
        self.dropped[source] += 1
        return False
