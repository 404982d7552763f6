"""The policy node's parts in-process (fast tier): its parameters, one JointState -> one command, the command
publisher of each control mode and the actor role's step stream.

Nodes are built in this process and driven by calling their subscription callbacks and timers directly;
publishers are captured, so no DDS timing is involved. The graph tests that run the same nodes as
processes are tests/test_ros_policy_node*.py and tests/test_ros_online.py (slow).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

rclpy = pytest.importorskip("rclpy")
from helpers.ros_inprocess import capture, deliver, ros_context  # noqa: E402
from std_msgs.msg import Bool, Float64, String  # noqa: E402

from robot_rl.control.targets import BodyRateTarget, JointTarget, PoseTarget  # noqa: E402
from robot_rl.core import ControlMode  # noqa: E402
from robot_rl.core.config import ConfigError  # noqa: E402
from robot_rl.policies.base import PolicySpec  # noqa: E402
from robot_rl.policies.mlp import MLPConfig, MLPPolicy  # noqa: E402
from robot_rl.robots import panda  # noqa: E402
from robot_rl.ros.command_publisher import CommandPublisher  # noqa: E402
from robot_rl.ros.conversions import joint_state_to_msg, pose_from_msg  # noqa: E402
from robot_rl.ros.policy_node import PolicyNode  # noqa: E402
from robot_rl.ros.policy_node_config import PolicyNodeConfig  # noqa: E402
from robot_rl.ros.streaming_actor import StreamingActor  # noqa: E402
from robot_rl.ros.target_conversions import body_rate_target_from_msg  # noqa: E402
from robot_rl.runtime.actions import Command, JointPosition  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.realtime("none")]  # in-process nodes, callbacks called directly

ARM_JOINTS = [*panda.JOINT_NAMES, *panda.EMBODIMENT.gripper_joints]


def joint_policy(folder: Path) -> Path:
    """A Panda joint_position MLP that asks for 10 rad on every joint and the gripper, whatever it sees."""
    torch.manual_seed(0)
    policy = MLPPolicy(MLPConfig(hidden=(16,)), PolicySpec({"joint_pos": 7, "joint_vel": 7}, {}, 8, robot="panda",
                                                           control_mode="joint_position"))
    state = {"min": -np.ones(7) * 3, "max": np.ones(7) * 3, "mean": np.zeros(7), "std": np.ones(7)}
    lim = np.full(8, 10.0)
    policy.set_stats({"joint_pos": state, "joint_vel": state,
                      "action": {"min": -lim, "max": lim, "mean": np.zeros(8), "std": lim}})
    with torch.no_grad():
        for p in policy.parameters():
            p.zero_()
        policy.mlp[-1].bias.fill_(1.0)  # type: ignore[operator]  # the top of the action range
    return policy.save(folder / "policy")


@pytest.fixture
def ros() -> Iterator[None]:
    with ros_context():
        yield


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """The nodes set torch's thread count for the whole process: the test's neighbours get theirs back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_policy_node_config_parses_good_parameters_and_names_bad_ones() -> None:
    good = PolicyNodeConfig(policy_path="ckpt", control_mode="joint_position", goal_pos=(0.5, 0.0, 0.2),
                            constants="goal_vel=0 0 0; command=[0.3, 0, 0]", device="cpu", image_transport="compressed",
                            learner_connect="robot:7000", learner_secret_file="learner.key")
    assert good.rate_hz == 10.0 and good.num_threads == 1 and good.goal_pos == (0.5, 0.0, 0.2)
    bad = [({"policy_path": ""}, "policy_path: a checkpoint folder is required"),
           ({"control_mode": "teleport"}, "'teleport' is not"),
           ({"rate_hz": 0.0}, r"rate_hz must be in \(0, 200\]"), ({"goal_pos": (1.0, 2.0)}, "goal_pos must have 3"),
           ({"constants": "goal_vel=abc"}, "goal_vel has a value that is not a number"),
           ({"device": "tpu"}, "device: must be one of"), ({"image_transport": "theora"}, "image_transport must be"),
           ({"camera_timeout_s": 0.0}, "camera_timeout_s must be > 0"), ({"send_every": 0}, "send_every must be >= 1"),
           ({"learner_connect": "robot:7000"}, "learner_connect needs learner_secret_file"),
           ({"num_threads": -1}, "num_threads must be >= 0")]
    for fields, message in bad:
        with pytest.raises(ValueError, match=message):
            PolicyNodeConfig(**{"policy_path": "ckpt", **fields})  # type: ignore[arg-type, dict-item]


def test_policy_node_refuses_a_bad_parameter_before_loading_anything() -> None:
    with ros_context(["--ros-args", "-p", "policy_path:=/nowhere", "-p", "rate_hz:=500.0"]), \
            pytest.raises(ConfigError, match=r"PolicyNodeConfig: rate_hz must be in \(0, 200\], got 500.0"):
        PolicyNode()


def test_policy_node_turns_one_joint_state_into_one_clipped_joint_command(tmp_path: Path, torch_threads: None) -> None:
    ckpt = joint_policy(tmp_path)
    with ros_context(["--ros-args", "-p", f"policy_path:={ckpt}", "-p", "device:=cpu", "-p", "rate_hz:=50.0"]):
        node = PolicyNode()
        targets, grippers, actions = capture(node.out.pub), capture(node.out.pub_gripper), capture(node.pub_action)
        assert node.out.topic == "target_joint" and node.adapter.action_dim == 8
        node._tick()
        assert not targets  # no joint_states yet: nothing is sent, the controller holds
        deliver(node, "/joint_states", joint_state_to_msg(list(panda.JOINT_NAMES), np.zeros(7), np.zeros(7)))
        node._tick()
        assert not targets  # the fingers are missing: that message was skipped
        deliver(node, "/joint_states", joint_state_to_msg(ARM_JOINTS, np.r_[panda.HOME_Q, 0.02, 0.02], np.zeros(9)))
        deadline = time.monotonic() + 2.0
        while not targets and time.monotonic() < deadline:  # inference runs on the runner's thread
            node._tick()
            time.sleep(0.005)
        assert len(targets) == len(actions) == len(grippers) == 1
        (msg,) = targets
        assert list(msg.name) == list(panda.JOINT_NAMES) and len(msg.position) == 7
        # 10 rad asked on every joint: each target is that joint's upper limit, never beyond
        np.testing.assert_allclose(msg.position, panda.EMBODIMENT.limits.position_upper)
        assert grippers[0].data == 1.0 and actions[0].data.tolist() == pytest.approx([10.0] * 8)
        node.close()
        node.destroy_node()


def test_command_publisher_sends_each_mode_on_its_own_topic(ros: None) -> None:
    node = rclpy.create_node("command_probe")
    try:
        rates = CommandPublisher(node, ControlMode.THRUST_BODY_RATES, [], False, "base_link")
        arm = CommandPublisher(node, ControlMode.CARTESIAN_DELTA, panda.JOINT_NAMES, True, "base")
        joints = CommandPublisher(node, ControlMode.JOINT_POSITION, panda.JOINT_NAMES, False, "base")
        topics = {p.topic_name for p in node.publishers}
        assert {"/target_body_rates", "/target_pose", "/target_gripper", "/target_joint"} <= topics
        assert rates.pub_gripper is None and joints.pub_gripper is None and rates.topic == "target_body_rates"

        twist, pose, grip, joint = capture(rates.pub), capture(arm.pub), capture(arm.pub_gripper), capture(joints.pub)
        rates.publish(Command(BodyRateTarget(0.4, np.array([0.1, -0.2, 0.3]))))
        back = body_rate_target_from_msg(twist[0])
        assert back.thrust == 0.4 and back.rates.tolist() == [0.1, -0.2, 0.3]
        assert twist[0].header.frame_id == "base_link" and twist[0].header.stamp.sec > 0
        arm.publish(Command(PoseTarget(np.array([0.5, 0.1, 0.3]), np.array([0.0, 1.0, 0.0, 0.0])), 0.7))
        arm.publish(Command(PoseTarget(np.array([0.5, 0.1, 0.2]), np.array([0.0, 1.0, 0.0, 0.0])), 0.2),
                    target_only=True)  # holding: the pose again, the gripper left alone
        assert len(pose) == 2 and [g.data for g in grip] == [0.7]
        position, quat = pose_from_msg(pose[1])
        np.testing.assert_allclose(position, [0.5, 0.1, 0.2])
        np.testing.assert_allclose(np.abs(quat), [0.0, 1.0, 0.0, 0.0])
        joints.publish(Command(JointTarget(np.asarray(panda.HOME_Q))))
        assert list(joint[0].name) == list(panda.JOINT_NAMES)
        np.testing.assert_allclose(joint[0].position, panda.HOME_Q)
    finally:
        node.destroy_node()


class Sender:
    """Stands in for the learner link: records batches, flushes and closing."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.flushed: list[float] = []
        self.closed = False
        self.version: Any = None

    def send(self, batch: list[Any]) -> None:
        self.batches.append(list(batch))

    def flush(self, timeout: float) -> None:
        self.flushed.append(timeout)

    def close(self) -> None:
        self.closed = True


def test_streaming_actor_labels_policy_and_human_steps_and_ends_episodes_on_events(ros: None,
                                                                                  tmp_path: Path) -> None:
    node = rclpy.create_node("actor_probe")
    sender = Sender()
    q = [np.asarray(panda.HOME_Q) + 0.05 * k for k in range(6)]
    obs = [{"joint_pos": x.astype(np.float32)} for x in q]
    now = {"obs": obs[4]}
    try:
        actor = StreamingActor(node, tmp_path, sender, JointPosition("panda").relabel, lambda: 4, 2, lambda: now["obs"])
        assert sender.version() == 4  # the link reports what acts now
        a0, base = np.full(8, 1.5, np.float32), np.full(8, 0.25, np.float32)
        actor.tick(obs[0], None, 4)  # nothing proposed yet: no step opens
        actor.tick(obs[0], a0, 4, base)
        actor.tick(obs[1], None, 4)  # inference late: the last proposal stays in force
        deliver(node, "/intervention", Bool(data=True))
        deliver(node, "/teleop/gripper", Float64(data=0.25))
        deliver(node, "/teleop/gripper", Float64(data=float("nan")))  # ignored
        actor.tick(obs[2], np.zeros(8, np.float32), 4)
        assert len(sender.batches) == 1  # send_every=2
        first, second = sender.batches[0]
        assert first.action.tolist() == [1.0] * 8 and first.policy_action.tolist() == [1.5] * 8  # clipped / raw
        assert first.base_action.tolist() == [0.25] * 8 and not first.is_intervention
        assert second.action.tolist() == [1.0] * 8 and second.step == 1 and not second.is_intervention
        actor.tick(obs[3], np.zeros(8, np.float32), 4)  # closes the human's step opened at obs[2]
        deliver(node, "/episode_event", String(data=" Success "))
        human, success = sender.batches[1]  # the event flushed an incomplete batch
        assert human.is_intervention and human.segment_id != first.segment_id
        np.testing.assert_allclose(human.action, np.r_[q[3], 2 * 0.25 - 1], atol=1e-6)  # relabelled from the motion
        assert success.reward == 1.0 and success.terminated and success.next_observation["joint_pos"][0] == obs[4][
            "joint_pos"][0]
        assert {t.episode_id for t in (first, second, human, success)} == {0}
        actor.tick(obs[4], np.zeros(8, np.float32), 4)
        deliver(node, "/episode_event", String(data="rerecord"))  # the open step is dropped, a new episode begins
        actor.tick(obs[5], np.zeros(8, np.float32), 4)
        actor.tick(obs[0], np.zeros(8, np.float32), 4)
        actor.close()
        (last,) = sender.batches[2]
        assert last.episode_id == 2 and last.step == 0
        assert sender.flushed == [2.0] and sender.closed
    finally:
        node.destroy_node()
