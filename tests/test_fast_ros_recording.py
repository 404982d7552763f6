"""The recorder's floating-base inputs in-process (fast tier): odometry, targets and commands become one step.

A :class:`FloatingBaseSampler` is built on a node in this process and fed through its subscription callbacks;
what it samples must be what the policy node would have seen (the same observation sources) and the action
in force, as the env's action. The recorder node on a live graph is tests/test_ros_teleop_*.py's (slow).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import TwistStamped  # noqa: E402
from helpers.ros_inprocess import deliver, ros_context  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402

from robot_rl.control.base import RobotState  # noqa: E402
from robot_rl.robots import cf2x, g1  # noqa: E402
from robot_rl.ros.conversions import joint_state_to_msg, pose_to_msg  # noqa: E402
from robot_rl.ros.floating_base_recording import HUMANOID_KEYS, QUADROTOR_KEYS, FloatingBaseSampler  # noqa: E402
from robot_rl.ros.odometry import odometry_to_msg  # noqa: E402
from robot_rl.runtime.actions import MAX_BODY_RATE, joint_position_map  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.realtime("none")]  # in-process nodes, callbacks called directly

YAW_90 = np.array([np.sqrt(0.5), 0.0, 0.0, np.sqrt(0.5)])
UPRIGHT = np.array([1.0, 0.0, 0.0, 0.0])


@pytest.fixture
def node() -> Iterator[Any]:
    with ros_context():
        n = rclpy.create_node("recording_probe")
        try:
            yield n
        finally:
            n.destroy_node()


def odometry(pos: list[float], linvel: list[float], quat: np.ndarray = YAW_90) -> Any:
    state = RobotState(np.zeros(0), np.zeros(0), base_pos=np.array(pos), base_quat=quat,
                       base_linvel=np.array(linvel), base_angvel=np.array([0.0, 0.0, 0.5]))
    return odometry_to_msg(state, 1_000_000_000)


def twist(linear: tuple[float, float, float], angular_z: float = 0.0) -> TwistStamped:
    msg = TwistStamped()
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = linear
    msg.twist.angular.z = angular_z
    return msg


def now(node: Any) -> float:
    return node.get_clock().now().nanoseconds * 1e-9


def step(sampler: FloatingBaseSampler, node: Any, joints: Any = None, human: bool = False) -> tuple[dict, np.ndarray]:
    """The (observation, action) sampled now; every input is there."""
    sample = sampler.sample(joints, human, now(node))
    assert sample is not None
    return sample


def test_quadrotor_step_takes_the_goal_of_whoever_flies_and_the_rates_in_force(node: Any) -> None:
    warnings: list[str] = []
    sampler = FloatingBaseSampler(node, "cf2x", 50.0, (0.0, 0.0, 1.0), warnings.append)
    assert sampler.mode == "thrust_body_rates" and not sampler.humanoid
    assert sampler.sample(None, False, now(node)) is None  # no odometry yet
    deliver(node, "/odom", odometry([0.1, 0.2, 0.9], [1.0, 0.0, 0.0]))
    obs, hover = step(sampler, node)
    assert set(obs) == {*QUADROTOR_KEYS, "goal_pos", "goal_vel"}
    np.testing.assert_allclose(obs["position"], [0.1, 0.2, 0.9], atol=1e-6)
    np.testing.assert_allclose(obs["linvel"], [1.0, 0.0, 0.0], atol=1e-6)  # world frame, as the env reports it
    np.testing.assert_allclose(obs["goal_pos"], [0.0, 0.0, 1.0])  # the configured goal
    np.testing.assert_array_equal(obs["goal_vel"], np.zeros(3))
    assert hover.shape == (4,) and 0.0 < hover[0] < 1.0 and np.all(hover[1:] == 0.0)  # hover thrust, no rates

    deliver(node, "/target_pose", pose_to_msg(np.array([1.0, 0.0, 1.5]), UPRIGHT, 0, "odom"))
    deliver(node, "/teleop/target_pose", pose_to_msg(np.array([-1.0, 0.0, 0.5]), UPRIGHT, 0, "odom"))
    deliver(node, "/teleop/cmd_vel", twist((0.0, 0.4, 0.0)))
    deliver(node, "/intervention", Bool(data=True))
    policy_obs, _ = step(sampler, node)
    human_obs, _ = step(sampler, node, human=True)
    np.testing.assert_allclose(policy_obs["goal_pos"], [1.0, 0.0, 1.5])
    np.testing.assert_allclose(human_obs["goal_pos"], [-1.0, 0.0, 0.5])
    np.testing.assert_allclose(human_obs["goal_vel"], [0.0, 0.4, 0.0])  # the human's velocity command

    rates = TwistStamped()
    rates.twist.linear.z = 2.0 * cf2x.THRUST_MAX  # half the collective range
    rates.twist.angular.x = 0.5 * MAX_BODY_RATE
    deliver(node, "/target_body_rates", rates)
    _, action = step(sampler, node)
    np.testing.assert_allclose(action, [0.5, 0.5, 0.0, 0.0], atol=1e-6)
    rates.twist.linear.z = -1.0  # a negative thrust: refused, the rates in force stay
    deliver(node, "/target_body_rates", rates)
    np.testing.assert_allclose(step(sampler, node)[1], action)
    bad = odometry([0.0, 0.0, 1.0], [0.0, 0.0, 0.0])
    bad.pose.pose.position.x = float("nan")
    deliver(node, "/odom", bad)
    np.testing.assert_allclose(step(sampler, node)[0]["position"], [0.1, 0.2, 0.9], atol=1e-6)
    assert any("target_body_rates" in w for w in warnings) and any(w.startswith("skipping odom") for w in warnings)


def test_humanoid_step_needs_the_joints_and_records_the_policys_joint_action(node: Any) -> None:
    warnings: list[str] = []
    sampler = FloatingBaseSampler(node, "g1", 50.0, (), warnings.append)
    assert sampler.humanoid and sampler.mode == "joint_position"
    deliver(node, "/odom", odometry([0.0, 0.0, 0.78], [0.3, 0.0, 0.0], quat=UPRIGHT))
    joints = (g1.STAND_Q.copy(), np.zeros(29))
    assert sampler.sample(None, False, now(node)) is None  # the joints are part of every humanoid step
    deliver(node, "/cmd_vel", twist((0.3, 0.0, 0.0), angular_z=0.2))
    obs, hold = step(sampler, node, joints)
    assert set(obs) == {*HUMANOID_KEYS, "joint_pos", "joint_vel", "command"}
    assert obs["base_height"].tolist() == pytest.approx([0.78])
    np.testing.assert_allclose(obs["projected_gravity"], [0.0, 0.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(obs["command"], [0.3, 0.0, 0.2], atol=1e-6)  # vx, vy, yaw rate
    np.testing.assert_allclose(hold, joint_position_map("g1").to_action(g1.STAND_Q), atol=1e-6)  # hold the posture
    target = g1.STAND_Q.copy()
    target[1] += 0.1  # a hip roll: the stand posture holds it mid-range
    deliver(node, "/target_joint", joint_state_to_msg(list(g1.JOINT_NAMES), target))
    _, action = step(sampler, node, joints)
    assert action.shape == (29,) and action[1] > hold[1] and np.count_nonzero(np.abs(action - hold) > 1e-6) == 1
    deliver(node, "/target_joint", joint_state_to_msg(list(g1.JOINT_NAMES[:5]), target[:5]))  # missing joints
    np.testing.assert_allclose(step(sampler, node, joints)[1], action)
    assert any("not recording target_joint" in w for w in warnings)
