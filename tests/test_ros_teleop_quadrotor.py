"""A human flies the simulated Crazyflie by gamepad (quad_position) on the real quadrotor_sim graph, recorded.

One graph start (sim, safety, teleop, recorder as real processes); the gamepad is a FIFO fed with Linux
joystick events, as in test_ros_teleop.py. The human takes over at the hover pose (no jump), pushes the stick
forward for ~2 s, lets go of the stick (the setpoint stops), then of the dead-man button (the vehicle holds
where it is); the recorded episode carries the intervention flags, the human's setpoint as goal_pos and
thrust_body_rates actions.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from geometry_msgs.msg import PoseStamped  # noqa: E402
from helpers.ros_spin import spin_until  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.data.store import EpisodeStore  # noqa: E402
from robot_rl.robots import cf2x  # noqa: E402
from robot_rl.ros.conversions import pose_from_msg  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.odometry import odometry_from_msg  # noqa: E402
from robot_rl.ros.qos import LATCHED  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SPEED = 0.5
"""Setpoint speed at full deflection [m/s] (the launch file's teleop_speed)."""
TRACKING_BOUND = 0.1
"""How far the hovering vehicle may be from a setpoint that stopped moving 1.5 s ago [m]."""


def _js(value: int, kind: int, number: int) -> bytes:
    return struct.pack("<IhBB", 0, value, kind, number)


@pytest.fixture(scope="module")
def flight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Fly the graph once; everything the tests check."""
    tmp = tmp_path_factory.mktemp("quad_teleop")
    fifo, dataset = tmp / "js0", tmp / "flights.zarr"
    os.mkfifo(fifo)
    description = load_launch_file("quadrotor_sim.launch.yaml", {
        "with_teleop": "true", "teleop_device": "gamepad", "teleop_device_path": str(fifo), "record": "true",
        "dataset": str(dataset), "policy_rate_hz": "25.0", "teleop_speed": str(SPEED)})
    got: dict[str, Any] = {"odom": [], "targets": [], "intervention": [], "status": [], "dataset": dataset}
    with launch(description, tmp / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("quad_teleop_probe")
        writer = None
        try:
            node.create_subscription(Odometry, "/odom", lambda m: got["odom"].append(odometry_from_msg(m)[0]), 10)
            targets = node.create_subscription(PoseStamped, "/teleop/target_pose", got["targets"].append, 10)
            node.create_subscription(Bool, "/intervention", lambda m: got["intervention"].append(m.data), LATCHED)
            node.create_subscription(String, "/recorder/status", lambda m: got["status"].append(m.data), LATCHED)
            success = node.create_client(Trigger, "/teleop/success")

            def connected() -> bool:  # discovery can take seconds under load: act only once everyone hears the teleop
                return (any("episode open" in s and "intervention off" in s for s in got["status"])
                        and got["intervention"][:1] == [False] and targets.get_publisher_count() > 0
                        and len(got["odom"]) > 0)
            assert spin_until(node, 60, until=connected), (got["status"], got["intervention"], graph.log("recorder"))
            assert abs(got["odom"][-1][2] - 1.0) < 0.05, (got["odom"][-1], graph.log("safety"), graph.log("sim"))
            writer = os.open(fifo, os.O_WRONLY)
            spin_until(node, 0.5)
            got["hover"] = got["odom"][-1].copy()
            os.write(writer, _js(1, 0x01, 4) + _js(-32767, 0x02, 1))  # hold LB (dead-man), left stick forward
            assert spin_until(node, 10, until=lambda: got["intervention"][-1:] == [True]), graph.log("teleop")
            got["takeover_odom"] = got["odom"][-1].copy()
            spin_until(node, 2.0)
            os.write(writer, _js(0, 0x02, 1))  # stick back to centre, still holding LB: the setpoint stops
            got["n_moving"] = len(got["targets"])
            spin_until(node, 1.5)
            got["settled"] = (pose_from_msg(got["targets"][-1])[0], got["odom"][-1].copy())
            os.write(writer, _js(0, 0x01, 4))  # let go: the policy side (here: hold) takes over
            assert spin_until(node, 10, until=lambda: got["intervention"][-1] is False)
            got["n_released"] = len(got["targets"])
            got["release_odom"] = got["odom"][-1].copy()
            spin_until(node, 1.0)
            got["after_release"] = got["odom"][-1].copy()
            assert success.wait_for_service(timeout_sec=10)
            future = success.call_async(Trigger.Request())
            assert spin_until(node, 10, until=lambda: any("1 episodes in store" in s for s in got["status"])), (
                graph.log("recorder"))
            assert future.done()
            got["final_targets"] = len(got["targets"])
            got["logs"] = {name: graph.log(name) for name in ("sim", "teleop", "recorder")}
        finally:
            if writer is not None:
                os.close(writer)
            node.destroy_node()
            rclpy.shutdown()
    yield got


def test_takeover_starts_at_the_hover_pose(flight: dict[str, Any]) -> None:
    first = pose_from_msg(flight["targets"][0])
    assert np.linalg.norm(first[0] - flight["takeover_odom"]) < 0.03  # the setpoint starts where the vehicle is
    assert flight["targets"][0].header.frame_id == "world"


def test_the_vehicle_follows_the_human_velocity(flight: dict[str, Any]) -> None:
    targets = [pose_from_msg(m)[0] for m in flight["targets"]]
    moved = targets[flight["n_moving"] - 1] - targets[0]
    assert moved[0] == pytest.approx(SPEED * 2.0, rel=0.3), moved  # ~2 s at 0.5 m/s along +x (wall-clock pacing)
    assert abs(moved[1]) < 1e-6 and abs(moved[2]) < 1e-6
    target, position = flight["settled"]
    assert np.linalg.norm(position - target) < TRACKING_BOUND, (position, target)
    assert position[0] - flight["hover"][0] > 0.7  # it really flew forward


def test_release_holds_where_it_is_and_stops_the_setpoints(flight: dict[str, Any]) -> None:
    assert flight["intervention"][0] is False and True in flight["intervention"]
    assert flight["final_targets"] <= flight["n_released"] + 1  # no more human setpoints once handed back
    assert np.linalg.norm(flight["after_release"] - flight["release_odom"]) < 0.05, flight["logs"]["sim"][-2000:]


def test_the_recorded_episode_carries_interventions_and_setpoints(flight: dict[str, Any]) -> None:
    with EpisodeStore.open(flight["dataset"]) as store:
        assert store.info.controller["control_mode"] == "thrust_body_rates" and store.info.robot == cf2x.NAME
        assert store.episode_info(0).success is True
        ep = store.read_episode(0)
    human = ep["is_intervention"].astype(bool)
    assert human.any() and (~human).any()
    assert list(np.unique(ep["segment_id"])) == [0, 1, 2]  # policy (hold) -> human -> policy
    goal = ep["observation.goal_pos"]
    before = goal[ep["segment_id"] == 0]
    np.testing.assert_allclose(before, np.tile([0.0, 0.0, 1.0], (len(before), 1)))  # the configured goal before
    assert goal[human][-1][0] - goal[human][0][0] > 0.7  # the human's setpoint moved forward
    position = ep["observation.position"]
    assert position[human][-1][0] - position[human][0][0] > 0.7
    action = ep["action"]
    assert action.shape[1] == 4 and np.all(np.isfinite(action))
    assert np.all((action[:, 0] >= 0) & (action[:, 0] <= 1)) and np.all(np.abs(action[:, 1:]) <= 1)
    hover = cf2x.MASS * cf2x.GRAVITY / (4 * cf2x.THRUST_MAX)
    assert np.mean(action[human, 0]) == pytest.approx(hover, rel=0.25)  # relabelled: about the hover thrust
