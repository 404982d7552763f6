"""The human steers a walking policy's command on the real humanoid_sim graph; the policy keeps walking.

One graph start (sim, safety, policy, teleop in base_velocity mode, recorder as real processes). The probe
plays the robot's normal command source (``cmd_vel``, a navigation stack); the gamepad (a FIFO fed with
Linux joystick events) takes over, pushes forward, lets go. During the intervention the policy keeps
streaming joint targets the controller accepts (the human commands the policy, not the joints), and the
recorded episode's ``command`` observation is the human's. The policy node's own ``command`` input is
checked in-process on :class:`ObservationSources`, the code the node runs.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import TwistStamped  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from helpers.tiny_policy import train_tiny_policy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.data.store import EpisodeStore  # noqa: E402
from robot_rl.robots import g1  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.observation_sources import ObservationSources  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402
from robot_rl.ros.teleop_node import TeleopNodeConfig, twist_to_msg  # noqa: E402
from robot_rl.sim.experts import BalanceExpert  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WALK_KEYS = ["joint_pos", "joint_vel", "base_quat", "base_angvel", "base_linvel", "projected_gravity", "command"]
NAV = np.array([0.2, 0.0, 0.1])
"""What the probe's stand-in navigation stack commands on cmd_vel (vx, vy, yaw rate)."""
HUMAN = np.array([0.8, 0.0, 0.0])
"""Full forward deflection in base_velocity mode: HumanoidWalk's top speed."""


def _js(value: int, kind: int, number: int) -> bytes:
    return struct.pack("<IhBB", 0, value, kind, number)


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the graph once; everything the tests check."""
    tmp = tmp_path_factory.mktemp("humanoid_teleop")
    policy = train_tiny_policy("robot_rl/HumanoidWalk-v0", BalanceExpert(), WALK_KEYS, steps=40, updates=10)
    fifo, dataset = tmp / "js0", tmp / "walk.zarr"
    os.mkfifo(fifo)
    description = load_launch_file("humanoid_sim.launch.yaml", {
        "with_policy": "true", "policy_path": str(policy.save(tmp / "policy")), "policy_rate_hz": "25.0",
        "with_teleop": "true", "teleop_device": "gamepad", "teleop_device_path": str(fifo), "record": "true",
        "dataset": str(dataset)})
    got: dict[str, Any] = {"targets": [], "intervention": [], "status": [], "modes": [], "rejected": [],
                           "dataset": dataset}
    with launch(description, tmp / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("humanoid_teleop_probe")
        writer = None
        try:
            node.create_subscription(JointState, "/target_joint", lambda m: got["targets"].append(time.monotonic()), 10)
            node.create_subscription(Bool, "/intervention", lambda m: got["intervention"].append(m.data), LATCHED)
            node.create_subscription(String, "/recorder/status", lambda m: got["status"].append(m.data), LATCHED)
            node.create_subscription(String, "/controller/mode", lambda m: got["modes"].append(m.data), LATCHED)

            def on_diag(msg: DiagnosticArray) -> None:
                got["rejected"] += [int(v.value) for s in msg.status for v in s.values if v.key == "rejected_targets"]
            node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
            nav = node.create_publisher(TwistStamped, "/cmd_vel", 10)
            success = node.create_client(Trigger, "/teleop/success")

            def spin(seconds: float, until: Any = None) -> bool:
                return spin_until(node, seconds, until, tick=lambda: nav.publish(
                    twist_to_msg(np.r_[NAV[:2], 0.0], np.r_[0.0, 0.0, NAV[2]], time.time_ns(), "base")))

            def ready() -> bool:
                return len(got["targets"]) > 5 and any("episode open" in s and "intervention off" in s
                                                       for s in got["status"])
            assert spin(60, until=ready), graph.log("policy") + graph.log("recorder")
            writer = os.open(fifo, os.O_WRONLY)
            spin(1.0)
            os.write(writer, _js(1, 0x01, 4) + _js(-32767, 0x02, 1))  # hold LB, left stick fully forward
            assert spin(10, until=lambda: got["intervention"][-1:] == [True]), graph.log("teleop")
            t_human = time.monotonic()
            spin(1.5)
            os.write(writer, _js(0, 0x01, 4) + _js(0, 0x02, 1))  # hand back
            assert spin(10, until=lambda: got["intervention"][-1] is False)
            got["human_window"] = (t_human, time.monotonic())
            spin(1.0)
            assert success.wait_for_service(timeout_sec=10)
            success.call_async(Trigger.Request())
            assert spin(10, until=lambda: any("1 episodes in store" in s for s in got["status"])), graph.log("recorder")
            got["running"] = graph.is_running("policy") and graph.is_running("sim")
            got["sim_log"] = graph.log("sim")
        finally:
            if writer is not None:
                os.close(writer)
            node.destroy_node()
            rclpy.shutdown()
    yield got


def test_the_policy_keeps_walking_while_the_human_steers(walk: dict[str, Any]) -> None:
    start, end = walk["human_window"]
    during = [t for t in walk["targets"] if start < t < end]
    assert len(during) > 0.5 * 25 * (end - start), len(during)  # target_joint kept streaming at ~25 Hz
    assert walk["running"] and "override" not in walk["modes"]  # the controller never handed the joints over
    assert "human override" not in walk["sim_log"]
    assert (walk["rejected"] and max(walk["rejected"]) == 0) or "estop" in walk["modes"], walk["sim_log"][-2000:]


def test_the_recorded_command_is_the_humans_during_the_intervention(walk: dict[str, Any]) -> None:
    with EpisodeStore.open(walk["dataset"]) as store:
        assert store.info.controller["control_mode"] == "joint_position" and store.info.robot == g1.NAME
        ep = store.read_episode(0)
    human = ep["is_intervention"].astype(bool)
    assert human.any() and (~human).any()
    assert list(np.unique(ep["segment_id"])) == [0, 1, 2]
    command, segment = ep["observation.command"], ep["segment_id"]
    np.testing.assert_allclose(command[segment == 0][-10:], np.tile(NAV, (10, 1)), atol=1e-6)  # cmd_vel before
    # the first human sample or two may precede the first teleop/cmd_vel (zero: stand), the rest are the human's
    np.testing.assert_allclose(command[segment == 1][2:], np.tile(HUMAN, ((segment == 1).sum() - 2, 1)), atol=1e-6)
    np.testing.assert_allclose(command[segment == 2], np.tile(NAV, ((segment == 2).sum(), 1)), atol=1e-6)  # at once
    assert ep["action"].shape[1] == 29 and np.all(np.abs(ep["action"]) <= 1.0 + 1e-6)
    assert len({tuple(np.round(a, 5)) for a in ep["action"][human]}) > 1  # the policy acted under the human's command


def test_policy_node_command_input_follows_cmd_vel_and_the_human() -> None:
    """The policy node's ObservationSources: constant by default, cmd_vel, teleop/cmd_vel while intervening."""
    rclpy.init()
    node = rclpy.create_node("command_source_probe")
    try:
        sources = ObservationSources(node, ["command"], "g1", {}, {"command": np.array([0.3, 0.0, 0.0], np.float32)})
        pubs = {t: node.create_publisher(TwistStamped, t, 10) for t in ("/cmd_vel", "/teleop/cmd_vel")}
        intervention = node.create_publisher(Bool, "/intervention", LATCHED)
        obs = sources.observation()
        assert obs is not None
        np.testing.assert_allclose(obs["command"], [0.3, 0.0, 0.0])  # nothing received: the constant

        def command_becomes(value: list[float], topic: str, twist: tuple[list[float], list[float]]) -> bool:
            def check() -> bool:
                got = sources.observation()
                return got is not None and np.allclose(got["command"], value, atol=1e-6)
            return spin_until(node, 5, check, tick=lambda: pubs[topic].publish(
                twist_to_msg(np.array(twist[0]), np.array(twist[1]), time.time_ns(), "base")))

        assert command_becomes([0.5, 0.1, -0.2], "/cmd_vel", ([0.5, 0.1, 0.0], [0.0, 0.0, -0.2]))
        assert command_becomes([0.5, 0.1, -0.2], "/teleop/cmd_vel", ([-0.3, 0, 0], [0, 0, 0]))  # not in control
        intervention.publish(Bool(data=True))
        assert command_becomes([-0.3, 0.0, 0.0], "/teleop/cmd_vel", ([-0.3, 0, 0], [0, 0, 0]))  # the human wins
        assert sources.command is not None and sources.command.human
        time.sleep(0.6)
        got = sources.observation()
        assert got is not None and not got["command"].any()  # the human's stream went silent: stand still
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_teleop_node_config_refuses_bad_modes_and_ranges() -> None:
    assert TeleopNodeConfig(mode="base_velocity").state().mode.value == "base_velocity"
    with pytest.raises(ValueError, match="mode must be one of"):
        TeleopNodeConfig(mode="joint")
    with pytest.raises(ValueError, match="contain zero"):
        TeleopNodeConfig(mode="base_velocity", velocity_high=(-0.1, 0.3, 0.6))
    with pytest.raises(ValueError, match="empty workspace"):
        TeleopNodeConfig(mode="quad_position", workspace_low=(0.0, 0.0, 3.0))
