"""Learner node: the online learner of a run folder, beside the ROS graph (never in its control loop).

It runs :class:`robot_rl.learners.learner_process.OnlineLearner` on a thread: transitions arrive from
the policy node (its ``learner_run`` parameter) over the learner's authenticated socket, new weights
go to ``<run_dir>/weights/v<N>/`` where the policy node swaps them in between chunks. The node only
reports: ``learner/version`` (Int64, latched) on every publish and ``learner/status`` (String, JSON
counters) once a second. On shutdown the learner checkpoints, so ``ros2 run robot_rl learner_node``
with the same ``run_dir`` resumes with its buffers.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from rclpy.node import Node
from std_msgs.msg import Int64, String

from robot_rl.core.config import load_config, save_config
from robot_rl.learners.learner_process import OnlineLearner
from robot_rl.learners.online import CONFIG_FILE
from robot_rl.learners.online_config import OnlineConfig, default_config_path
from robot_rl.ros.node_main import run_node
from robot_rl.ros.params import declare_config
from robot_rl.ros.qos import LATCHED


@dataclass(frozen=True)
class LearnerNodeConfig:
    """Learner node parameters."""

    run_dir: str = ""
    """Run folder (weights, checkpoints, logs); an existing one is resumed."""
    config: str = ""
    """Online config YAML; "" uses the installed config/learners/online_pick_lift.yaml."""
    policy_path: str = ""
    """Policy to fine-tune when the run folder has no checkpoint yet."""
    demos: str = ""
    """Episode store of demonstrations mixed into every batch ("" : none)."""
    status_hz: float = 1.0
    """Rate of ``learner/status``."""

    def __post_init__(self) -> None:
        if not self.run_dir:
            raise ValueError("run_dir: a run folder is required")
        if not 0 < self.status_hz <= 50:
            raise ValueError(f"status_hz must be in (0, 50], got {self.status_hz}")


class LearnerNode(Node):
    """Runs the learner loop on a thread; publishes its version and counters."""

    def __init__(self) -> None:
        super().__init__("learner")
        cfg = self.config = declare_config(self, LearnerNodeConfig)
        online = load_config(OnlineConfig, cfg.config or default_config_path())
        online.policy = cfg.policy_path or online.policy
        online.learner.demos = cfg.demos or online.learner.demos
        run = Path(cfg.run_dir)
        run.mkdir(parents=True, exist_ok=True)
        save_config(online, run / CONFIG_FILE)
        self.learner = OnlineLearner(online, run)
        self.pub_version = self.create_publisher(Int64, "learner/version", LATCHED)
        self.pub_status = self.create_publisher(String, "learner/status", 10)
        self.published = -1
        self.result: dict[str, object] | None = None
        self.thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self.thread.start()
        self.create_timer(1.0 / cfg.status_hz, self._report)
        resumed = f", resumed {self.learner.resumed_from}" if self.learner.resumed_from else ""
        self.get_logger().info(f"learning in {run} from {online.policy}{resumed}")

    def _run(self) -> None:
        try:
            self.result = self.learner.run(handle_signals=False)
        except Exception as exc:  # report, do not die silently: the graph keeps running on old weights
            self.get_logger().error(f"learner stopped: {type(exc).__name__}: {exc}")

    def _report(self) -> None:
        learner = self.learner
        version = learner.publisher.version
        if version != self.published:
            self.pub_version.publish(Int64(data=int(version)))
            self.published = version
        status = {"version": version, "updates": learner.updates, "steps": learner.steps.total_added,
                  "human_steps": learner.algorithm.human_steps, "running": self.thread.is_alive()}
        self.pub_status.publish(String(data=json.dumps(status)))

    def close(self) -> None:
        """Stop the loop; it checkpoints and publishes once more."""
        self.learner.stop()
        self.thread.join(timeout=60.0)


def main(args: list[str] | None = None) -> int:
    """``ros2 run robot_rl learner_node``."""
    return run_node(LearnerNode, args)
