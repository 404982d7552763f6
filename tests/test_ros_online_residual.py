"""Residual RL on the ROS 2 graph: policy node (frozen base + residual) -> learner node -> residuals -> policy node.

Brought up from sim_arm_policy.launch.yaml with ``learn:=true`` and a ``learner.algorithm: residual``
config: the policy node streams every step with its base policy's action, the learner warms up on the
base alone, then trains SAC and publishes residuals, which the policy node swaps in between steps; its
executed action then differs from the base by at most the residual's bound. A success event closes the
episode with the sparse reward. Everything published stays finite.

The policy node joins the learner as a robot on another machine would (``learner_connect``: TCP with the
run's secret; config and residuals come over the connection into its own folder), so every stored step
also matches the policy node's outbox journal (count and hash).
"""

from __future__ import annotations

import json
import math
import socket
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.online_graph import online_graph  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Float64, Float64MultiArray, Int64, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from test_ros_policy_node import _policy  # noqa: E402

from robot_rl.core.transition_columns import decode_transitions  # noqa: E402
from robot_rl.fleet.delivery import read_commit, row_digests, transition_digest  # noqa: E402
from robot_rl.fleet.remote_run import actor_folder  # noqa: E402
from robot_rl.fleet.transport import load_or_create_key  # noqa: E402
from robot_rl.learners.buffers import ReplayBuffer  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WARMUP, SCALE = 20, 0.1
CONFIG = {"learner": {
    "algorithm": "residual", "update_to_data": 1.0, "updates_per_cycle": 5, "publish_every": 5,
    "checkpoint_every_s": 2.0, "device": "cpu",
    "residual": {"base": "policy", "scale": SCALE, "warmup_steps": WARMUP, "explore": True,
                 "sac": {"hidden": 32, "num_critics": 2, "num_target_critics": 2, "batch_size": 16, "utd_ratio": 1,
                         "device": "cpu"}}}}


def _finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def test_policy_node_runs_a_residual_on_its_base_and_swaps_in_the_learners_versions(tmp_path: Path) -> None:
    ckpt = _policy().save(tmp_path / "policy")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "run").mkdir()
    key = load_or_create_key(tmp_path / "run")  # the learner keeps it; a robot gets a copy
    (tmp_path / "robot.key").write_text(key.hex())
    (tmp_path / "robot.key").chmod(0o600)  # secret files readable by others are refused
    config = {**CONFIG, "fleet": {"listen": f"127.0.0.1:{port}"}}
    description, run = online_graph(tmp_path, ckpt, config, learner_connect=f"127.0.0.1:{port}",
                                    learner_secret_file=str(tmp_path / "robot.key"),
                                    learner_workdir=str(tmp_path / "robot"), actor_name="arm-1")
    # the episode ends through ~/success
    status: list[dict] = []
    learner_versions: list[int] = []
    policy_versions: list[int] = []
    published: dict[str, list[list[float]]] = {"action": [], "base": [], "pose": [], "gripper": []}
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("residual_probe")
        try:
            node.create_subscription(String, "/learner/status", lambda m: status.append(json.loads(m.data)), 10)
            node.create_subscription(Int64, "/learner/version", lambda m: learner_versions.append(m.data), LATCHED)
            node.create_subscription(Int64, "/policy/version", lambda m: policy_versions.append(m.data), LATCHED)
            node.create_subscription(Float64MultiArray, "/policy/action",
                                     lambda m: published["action"].append(list(m.data)), 50)
            node.create_subscription(Float64MultiArray, "/policy/base_action",
                                     lambda m: published["base"].append(list(m.data)), 50)
            node.create_subscription(PoseStamped, "/target_pose", lambda m: published["pose"].append(
                [m.pose.position.x, m.pose.position.y, m.pose.position.z, m.pose.orientation.x,
                 m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w]), 50)
            node.create_subscription(Float64, "/target_gripper", lambda m: published["gripper"].append([m.data]), 50)
            success = node.create_client(Trigger, "/teleop/success")

            def spin(seconds, until=None):  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until)

            assert spin(90, until=lambda: status and status[-1]["steps"] >= WARMUP), graph.log("learner")
            assert spin(60, until=lambda: learner_versions and learner_versions[-1] >= 2), graph.log("learner")
            new = learner_versions[-1]
            assert spin(30, until=lambda: policy_versions and policy_versions[-1] >= new), graph.log("policy")
            assert "swapped in residual" in graph.log("policy")
            executed = len(published["base"])
            assert spin(10, until=lambda: len(published["base"]) > executed + 10)  # steps under residual v>=2
            assert success.wait_for_service(timeout_sec=20)
            future = success.call_async(Trigger.Request())
            assert spin(20, until=future.done) and future.result() is not None
            at_success = status[-1]["steps"]  # up to 1 s old: wait well past one batch of episode 1
            assert spin(20, until=lambda: status[-1]["steps"] > at_success + 25)
            assert status[-1]["running"], graph.log("learner")
        finally:
            node.destroy_node()
            rclpy.shutdown()

    assert policy_versions == sorted(policy_versions) and policy_versions[0] == 0  # the base alone first
    assert published["base"] and all(_finite(v) for values in published.values() for v in values)
    log = [json.loads(line) for line in (run / "learner_log.jsonl").read_text().splitlines()]
    assert not [line for line in log if "error" in line]
    assert log[0]["steps"] >= WARMUP and log[0]["version"] == 1  # nothing published during the warm-up
    assert (run / "weights" / f"v{log[-1]['version']}" / "actor.json").is_file()

    steps = ReplayBuffer.load(run / "checkpoint" / "steps").transitions()
    assert steps and all(t.base_action is not None and t.base_action.shape == t.action.shape for t in steps)
    base = [np.clip(np.asarray(t.base_action), -1.0, 1.0) for t in steps]
    warmup = [i for i, t in enumerate(steps) if t.policy_version == 0]
    residual = [i for i, t in enumerate(steps) if t.policy_version >= 1]
    assert warmup and residual
    assert all(np.array_equal(steps[i].action, base[i]) for i in warmup)  # the base exactly, bit for bit
    gaps = np.array([np.max(np.abs(steps[i].action - base[i])) for i in residual])
    assert np.all(gaps <= SCALE + 1e-5) and np.any(gaps > 1e-4)  # a bounded, nonzero correction acts
    ends = [t for t in steps if t.terminated]
    assert len(ends) == 1 and ends[0].reward == 1.0 and ends[0].episode_id == 0  # the success event's reward
    assert all(t.reward == 0.0 for t in steps if not t.terminated)
    assert any(t.episode_id == 1 for t in steps)
    # exactly once: the checkpoint holds the robot's batches up to its mark, each step once; the graph may have
    # stopped before the last ones were acknowledged, and those wait in the robot's outbox for its next join
    outbox = actor_folder(tmp_path / "robot", key) / "outbox" / "arm-1"
    commit = read_commit(run / "checkpoint")
    assert commit is not None
    mark = commit["inbox"]["checkpointed"]["arm-1"]
    batches = [json.loads(line) for line in (outbox / "journal.jsonl").read_text().splitlines()]
    assert [b["seq"] for b in batches] == list(range(1, len(batches) + 1)) and mark >= 1
    assert sorted(int(f.stem) for f in outbox.glob("*.safetensors")) == [b["seq"] for b in batches if b["seq"] > mark]
    stored = ReplayBuffer.load(run / "checkpoint" / "steps")
    extra = decode_transitions((run / "checkpoint" / commit["held"]).read_bytes()) if commit["held"] else []
    assert Counter(d for b in batches if b["seq"] <= mark for d in b["steps"]) == Counter(
        row_digests(stored.columns, len(stored)) + [transition_digest(t) for t in extra])
