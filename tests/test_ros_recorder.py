"""Teleop data collection on the sim graph: the recorder writes marked interventions into a valid store."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from helpers.ros_spin import spin_until  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robot_rl.align.config import AlignConfig, CollectSettings  # noqa: E402
from robot_rl.align.episodes import load_episodes  # noqa: E402
from robot_rl.data.store import EpisodeStore  # noqa: E402
from robot_rl.ros.launch_processes import launch  # noqa: E402
from robot_rl.ros.launch_yaml import load_launch_file  # noqa: E402
from robot_rl.ros.teleop_node import LATCHED  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _js(value: int, kind: int, number: int) -> bytes:
    return struct.pack("<IhBB", 0, value, kind, number)


def test_teleop_session_is_recorded_with_interventions(tmp_path: Path) -> None:
    fifo, dataset = tmp_path / "js0", tmp_path / "demos.zarr"
    os.mkfifo(fifo)
    description = load_launch_file("sim_arm_teleop.launch.yaml", {
        "teleop_device": "gamepad", "teleop_device_path": str(fifo), "cameras": "[]", "dataset": str(dataset)})
    status: list[str] = []
    intervention: list[bool] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("recorder_probe")
        writer = None
        try:
            node.create_subscription(String, "/recorder/status", lambda m: status.append(m.data), LATCHED)
            node.create_subscription(Bool, "/intervention", lambda m: intervention.append(m.data), LATCHED)
            clients = {e: node.create_client(Trigger, f"/teleop/{e}") for e in ("success", "rerecord")}

            def spin(seconds, until=None):  # type: ignore[no-untyped-def]
                return spin_until(node, seconds, until)

            def call(event):  # type: ignore[no-untyped-def]
                assert clients[event].wait_for_service(timeout_sec=10)
                future = clients[event].call_async(Trigger.Request())
                assert spin(10, until=future.done)

            assert spin(60, until=lambda: any("episode open" in s for s in status)), graph.log("recorder")
            writer = os.open(fifo, os.O_WRONLY)
            spin(1.0)  # policy (idle) in control first
            os.write(writer, _js(1, 0x01, 4) + _js(-32767, 0x02, 1))  # take over, push forward
            assert spin(10, until=lambda: intervention and intervention[-1])
            spin(2.0)
            os.write(writer, _js(0, 0x01, 4) + _js(0, 0x02, 1))  # hand back
            spin(1.0)
            call("success")
            assert spin(10, until=lambda: any("1 episodes in store" in s for s in status)), status
            spin(1.0)
            call("rerecord")  # the second take is thrown away
            assert spin(10, until=lambda: "rerecord: discarded" in graph.log("recorder"))
        finally:
            if writer is not None:
                os.close(writer)
            node.destroy_node()
            rclpy.shutdown()

    with EpisodeStore.open(dataset) as store:
        # the take open at shutdown is kept (truncated, outcome unknown) unless it had no transition yet
        assert store.num_episodes in (1, 2)
        if store.num_episodes == 2:
            last = store.read_episode(1)
            assert store.episode_info(1).success is None and bool(last["truncated"][-1])
            assert not last["terminated"].any()
        assert store.info.controller["control_mode"] == "cartesian_pose"  # what a policy trained on it emits
        info = store.episode_info(0)
        assert info.success is True and info.length > 30  # ~4 s at 10 Hz
        ep = store.read_episode(0)
        human = ep["is_intervention"].astype(bool)
        assert human.any() and (~human).any()
        segments = ep["segment_id"]
        assert list(np.unique(segments)) == [0, 1, 2]  # policy -> human -> policy
        assert np.all(segments[human] == 1)
        target_x = ep["action"][human, 0]
        assert target_x[-1] - target_x[0] > 0.15  # the human pushed the target along +x (0.15 m/s for ~2 s)
        tcp_x = ep["observation.tcp_pos"][:, 0] if "observation.tcp_pos" in ep else ep["tcp_pos"][:, 0]
        assert tcp_x.max() - tcp_x[0] > 0.1  # and the simulated arm followed
        assert bool(ep["terminated"][-1])
        key = "observation.qpos" if "observation.qpos" in ep else "qpos"
        joints = ep["observation.joint_pos"] if "observation.joint_pos" in ep else ep["joint_pos"]
        assert ep[key].shape[1] == 9  # arm + finger joints, MuJoCo's order
        np.testing.assert_allclose(ep[key][:, :7], joints, atol=1e-6)

    # the teleop log is what sim-to-real alignment reads: the arm and finger joints as measured, and the tool
    # targets as sent, replayed by a simulator that takes absolute targets
    cfg = AlignConfig(robot="panda", env_id="robot_rl/ArmReach-v0", env_options={"control_mode": "cartesian_pose"},
                      holdout_episodes=1, collect=CollectSettings(env_id="robot_rl/ArmReach-v0", episodes=2, steps=40))
    first = load_episodes(dataset, cfg, 8, 10.0)[0]
    assert first.qpos.shape == (len(first.actions) + 1, 9)
    np.testing.assert_allclose(first.actions[:, :7], ep["action"][:, :7], atol=1e-6)
    assert set(np.unique(first.actions[:, 7])) <= {-1.0, 1.0}  # opening 0..1 -> the env's gripper action
