"""The policy node's actor role: its ticks become labelled transitions streamed to an online learner.

While the latched ``intervention`` is true a step is the human's, relabelled from the robot's measured
motion (and ``teleop/gripper``) into the policy's action space by the node's action adapter;
``episode_event`` (success / failure / rerecord) ends episodes; the success event is the sparse reward
(1 on the step it closes, 0 elsewhere). In a residual run every step also carries the frozen base's
action. Steps go out every ``send_every`` ticks; if the learner is away they queue (bounded) and go out
when it is back; to a learner on another machine (``learner_connect``) they go over TCP from a disk outbox
and are kept until the learner's checkpoint holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.node import Node
from std_msgs.msg import Bool, Float64, String

from robot_rl.fleet.transport import BatchingSender, local_sender
from robot_rl.ros.qos import EVENTS, LATCHED
from robot_rl.runtime.step_stream import Relabel, StepStream


class StreamingActor:
    """Ticks of a policy node -> transitions -> the learner of a run folder.

    ``relabel``: the node's action adapter's relabelling of the human's motion; ``version``: what acts now;
    ``observation``: the node's current observation (None while an input is missing).
    """

    def __init__(self, node: Node, run: Path, sender: Any, relabel: Relabel, version: Callable[[], int],
                 send_every: int, observation: Callable[[], dict[str, np.ndarray] | None]) -> None:
        self.node, self.observation = node, observation
        self.stream = StepStream(relabel)
        if sender is not None:
            sender.version = version
        self.sender = sender if sender is not None else local_sender(run)
        """A TcpActorClient to a learner on another machine, or the run folder's learner fed from a thread of
        its own: a control tick never waits for a learner that is busy training."""
        self.batches = BatchingSender(self.sender, send_every)
        self.human, self.human_gripper = False, 1.0
        self.last_action: np.ndarray | None = None
        self.last_base: np.ndarray | None = None
        node.create_subscription(Bool, "intervention", lambda m: setattr(self, "human", bool(m.data)), LATCHED)
        node.create_subscription(Float64, "teleop/gripper", self._on_gripper, 10)
        node.create_subscription(String, "episode_event", self._on_event, EVENTS)

    def _on_gripper(self, msg: Float64) -> None:
        if np.isfinite(msg.data):
            self.human_gripper = float(np.clip(msg.data, 0.0, 1.0))

    def _stamp(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    def tick(self, obs: dict[str, np.ndarray], action: np.ndarray | None, version: int,
             base: np.ndarray | None = None) -> None:
        """One control period: the proposal in force (the last one when inference is late) and its base."""
        if action is not None:
            self.last_action = np.asarray(action, np.float32)
            self.last_base = None if base is None else np.asarray(base, np.float32)
        if self.last_action is None:
            return
        t = self.stream.tick(obs, self.last_action, self.human, version, self.human_gripper, self._stamp(),
                             base_action=self.last_base)
        if t is not None:
            self.batches.add(t)

    def _on_event(self, msg: String) -> None:
        event, obs = msg.data.strip().lower(), self.observation()
        if event == "rerecord":
            self.stream.discard_episode()
        elif event in ("success", "failure") and obs is not None:
            t = self.stream.end_episode(obs, event == "success", self.human_gripper, self._stamp())
            if t is not None:
                self.batches.add(t)
            self.batches.flush()

    def close(self) -> None:
        """Send what is pending (briefly) and disconnect."""
        self.batches.flush()
        self.sender.flush(timeout=2.0)
        self.sender.close()
