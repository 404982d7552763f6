"""Real rclpy across processes: JointState goes out to an echo process over Fast DDS and comes back exact."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robot_rl.ros.conversions import joint_state_from_msg, joint_state_to_msg, stamp_to_ns  # noqa: E402

pytestmark = pytest.mark.ros
NAMES = [f"panda_joint{i}" for i in range(1, 8)]


def test_joint_state_round_trip_between_processes() -> None:
    assert os.environ["ROS_DOMAIN_ID"] and os.environ["ROS_LOG_DIR"]
    echo = subprocess.Popen([sys.executable, str(Path(__file__).parent / "helpers" / "joint_state_echo.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rng = np.random.default_rng(7)
    sent = [(rng.normal(size=7), rng.normal(size=7), rng.normal(size=7) * 50, int(1e9 * (i + 1) + i))
            for i in range(50)]
    received: list[JointState] = []
    rclpy.init()
    node = rclpy.create_node("roundtrip_test")
    said: list[str] = []
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        # whatever it prints later (Fast DDS warnings) is read, so a full pipe can never block its exit
        threading.Thread(target=said.extend, args=(echo.stdout,), daemon=True).start()
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        pub = node.create_publisher(JointState, "echo/in", qos)
        node.create_subscription(JointState, "echo/out", received.append, qos)
        deadline = time.monotonic() + 20
        while (pub.get_subscription_count() == 0 or node.count_publishers("echo/out") == 0) \
                and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
        assert pub.get_subscription_count() == 1, "echo process never subscribed"
        time.sleep(0.3)  # let the echo's own subscription to our side match as well
        for q, dq, tau, stamp in sent:
            pub.publish(joint_state_to_msg(NAMES, q, dq, tau, stamp_ns=stamp, frame_id="base"))
        while len(received) < len(sent) and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.05)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        echo.terminate()
        try:
            echo.wait(timeout=10)
        except subprocess.TimeoutExpired:  # seen once in a loaded suite run: the helper's DDS teardown hung
            echo.kill()
            echo.wait(timeout=10)

    assert len(received) == len(sent), "".join(said)[-3000:]
    for (q, dq, tau, stamp), msg in zip(sent, received):
        names, q2, dq2, tau2 = joint_state_from_msg(msg, NAMES)
        assert names == NAMES and msg.header.frame_id == "base"
        assert stamp_to_ns(msg.header.stamp) == stamp
        # float64 on the wire: bit-exact, not approximately equal
        assert q2.tobytes() == q.tobytes() and dq2.tobytes() == dq.tobytes() and tau2.tobytes() == tau.tobytes()


def test_joint_state_reorders_and_rejects_bad_messages() -> None:
    msg = joint_state_to_msg(["b", "a"], np.array([2.0, 1.0]), stamp_ns=5)
    names, q, dq, _ = joint_state_from_msg(msg, ["a", "b"])
    assert names == ["a", "b"] and q.tolist() == [1.0, 2.0] and np.isnan(dq).all()
    from robot_rl.core.spaces import SpecError

    with pytest.raises(SpecError, match=r"missing joints \['c'\]"):
        joint_state_from_msg(msg, ["a", "c"])
    msg.position = [float("nan"), 1.0]
    with pytest.raises(SpecError, match="position: contains NaN"):
        joint_state_from_msg(msg)
    msg.position = [1.0]
    with pytest.raises(SpecError, match="1 values for 2 names"):
        joint_state_from_msg(msg)
