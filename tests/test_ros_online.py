"""The online loop on the ROS 2 graph: policy node -> learner node -> new weights -> policy node.

Brought up from sim_arm_policy.launch.yaml with ``learn:=true`` and ``stand_in:=default`` (the sim plays the
robot that plays the real one, as ArmPickLift-RealStandIn-v0 does): the policy node streams every step to
the learner node, a human takeover (teleop's ``~/set_intervention``) marks steps as interventions,
the learner trains on them, publishes a version, and the policy node swaps it in; the success event
ends the episode. After shutdown the learner's checkpoint holds the human steps as interventions. Behind the
deployment gate the version on trial is announced on ``policy/on_trial`` and the teleop's console, its
episodes are judged by their success event, and the deployed weights go out again after the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.online_graph import online_graph  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Bool, Int64, String  # noqa: E402
from std_srvs.srv import SetBool, Trigger  # noqa: E402
from test_ros_policy_node import _policy  # noqa: E402

from robot_rl.learners.buffers import ReplayBuffer  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_policy_node_streams_to_the_learner_node_and_swaps_its_weights(tmp_path: Path) -> None:
    ckpt = _policy().save(tmp_path / "policy")
    description, run = online_graph(tmp_path, ckpt, {"learner": {"min_intervention_steps": 5, "publish_every": 20,
                                                                 "checkpoint_every_s": 2.0}},
                                     stand_in="default")
    status: list[dict] = []
    learner_versions: list[int] = []
    policy_versions: list[int] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("online_probe")
        try:
            node.create_subscription(String, "/learner/status", lambda m: status.append(json.loads(m.data)), 10)
            node.create_subscription(Int64, "/learner/version", lambda m: learner_versions.append(m.data), LATCHED)
            node.create_subscription(Int64, "/policy/version", lambda m: policy_versions.append(m.data), LATCHED)
            intervene = node.create_client(SetBool, "/teleop/set_intervention")
            success = node.create_client(Trigger, "/teleop/success")

            def spin(seconds, until=None):  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until)

            def call(client, request):  # type: ignore[no-untyped-def]
                assert client.wait_for_service(timeout_sec=20)
                future = client.call_async(request)
                assert spin(20, until=future.done) and future.result() is not None

            assert spin(90, until=lambda: status and status[-1]["steps"] >= 20), graph.log("learner")
            assert graph.wait_for_log("sim", "stand-in 'default' (commands 30 ms late)")
            assert status[-1]["human_steps"] == 0 and status[-1]["updates"] == 0  # no human data yet: no training
            call(intervene, SetBool.Request(data=True))
            assert spin(30, until=lambda: status[-1]["human_steps"] >= 15), graph.log("learner")
            call(intervene, SetBool.Request(data=False))
            assert spin(60, until=lambda: learner_versions and learner_versions[-1] >= 2), graph.log("learner")
            new = learner_versions[-1]
            assert spin(30, until=lambda: policy_versions and policy_versions[-1] >= new), graph.log("policy")
            assert "swapped in weights" in graph.log("policy")
            call(success, Trigger.Request())
            at_success = status[-1]["steps"]  # up to 1 s old: wait well past one batch of episode 1
            assert spin(20, until=lambda: status[-1]["steps"] > at_success + 25)
            human_total = status[-1]["human_steps"]
        finally:
            node.destroy_node()
            rclpy.shutdown()
    human = ReplayBuffer.load(run / "checkpoint" / "interventions")
    steps = ReplayBuffer.load(run / "checkpoint" / "steps").transitions()
    assert human.total_added >= human_total >= 15
    assert all(t.is_intervention for t in human.transitions())
    marked = [t for t in steps if t.is_intervention]
    assert len(marked) == human.total_added and len(steps) > len(marked)  # policy steps are kept too
    assert len({t.segment_id for t in marked}) == 1 and all(t.episode_id == 0 for t in marked)
    assert any(t.terminated and t.reward == 1.0 for t in steps)  # the success event closed episode 0
    assert any(t.episode_id == 1 for t in steps)  # ... and the stream went on in episode 1
    assert all(np.all(np.abs(t.action) <= 1.0) for t in marked)  # relabelled into the policy's action space


def test_behind_the_gate_the_graph_announces_the_trial_and_the_learner_judges_it_by_its_success_event(
        tmp_path: Path) -> None:
    ckpt = _policy().save(tmp_path / "policy")
    gate = {"enabled": True, "start_episodes": 1, "trial_episodes": 1, "gap_episodes": 1}
    description, run = online_graph(tmp_path, ckpt, {"learner": {"min_intervention_steps": 5, "publish_every": 20,
                                                                 "checkpoint_every_s": 2.0, "gate": gate}},
                                     stand_in="default")
    log = run / "learner_log.jsonl"

    def verdicts() -> list[dict]:
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        return [x for x in lines if "gate" in x]

    trial: list[bool] = []
    versions: list[int] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("gate_probe")
        try:
            node.create_subscription(Bool, "/policy/on_trial", lambda m: trial.append(bool(m.data)), LATCHED)
            node.create_subscription(Int64, "/policy/version", lambda m: versions.append(m.data), LATCHED)
            success = node.create_client(Trigger, "/teleop/success")

            def succeed() -> None:
                assert success.wait_for_service(timeout_sec=20)
                future = success.call_async(Trigger.Request())
                assert spin_until(node, 20, future.done) and future.result() is not None

            # the learner publishes its start on trial (v1): the policy node says so, the teleop asks to stand by
            assert spin_until(node, 90, lambda: versions and versions[-1] >= 1 and trial and trial[-1]), \
                graph.log("policy")
            assert spin_until(node, 20, lambda: "on trial: stand by" in graph.log("teleop")), graph.log("teleop")
            for _ in range(2):  # an episode begun before v1 came counts for nobody; one of v1 alone decides
                if verdicts():
                    break
                spin_until(node, 3)
                succeed()
                spin_until(node, 20, lambda: bool(verdicts()))
            (kept,) = verdicts()
            # judged by the success event (this policy sees no cube), kept, and deployed again as v2, not on trial
            assert kept["gate"] == "kept" and kept["candidate"] == 1 and (kept["successes"], kept["episodes"]) == (1, 1)
            assert kept["published"] == 2
            assert spin_until(node, 30, lambda: versions[-1] >= 2 and not trial[-1]), graph.log("policy")
            assert spin_until(node, 20, lambda: "v2 is deployed: take over when needed" in graph.log("policy")), \
                graph.log("policy")
            assert spin_until(node, 20, lambda: "trial is over" in graph.log("teleop")), graph.log("teleop")
        finally:
            node.destroy_node()
            rclpy.shutdown()
