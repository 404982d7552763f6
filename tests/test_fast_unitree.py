"""Unitree's low-level DDS in one process (fast tier): LowCmd/LowState round trips with their CRC, and the bridge
node between a joint target on ROS and the LowCmd on the robot's domain.

Both sides run in this process on a private DDS domain bound to lo (claimed, so no other test or robot hears
them); the robot side is a plain :class:`UnitreeDds` participant fed by the G1 emulator core. The graph with
the emulator as its own process is tests/test_hw_unitree.py's (slow).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="Unitree's DDS needs cyclonedds (the 'unitree' extra)")
from robot_rl.hardware import unitree_dds
from robot_rl.hardware import unitree_idl as idl
from robot_rl.hardware.unitree_dds import UnitreeDds
from robot_rl.hardware.unitree_emulator import EmulatorConfig, G1Emulator
from robot_rl.robots import g1
from robot_rl.ros.isolation import claim_domain_id


@pytest.fixture(scope="module")
def domain() -> int:
    return claim_domain_id()


def wait_for(take: Callable[[], list[np.ndarray]], until: Callable[[np.ndarray], bool] = lambda _: True,
             seconds: float = 2.0, tick: Callable[[], Any] | None = None) -> np.ndarray:
    """The first image ``take`` returns that satisfies ``until`` (``tick`` runs between polls)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for image in take():
            if until(image):
                return image
        if tick is not None:
            tick()
        time.sleep(0.002)
    raise AssertionError("no matching sample arrived")


def test_lowcmd_and_lowstate_cross_the_domain_bit_for_bit_with_their_crc(domain: int) -> None:
    controller = UnitreeDds(domain, "lo", idl.LOWCMD_TOPIC, idl.LOWSTATE_TOPIC)
    robot = UnitreeDds(domain, "lo", idl.LOWSTATE_TOPIC, idl.LOWCMD_TOPIC)
    listener = UnitreeDds(domain, "lo", None, idl.LOWCMD_TOPIC)
    try:
        assert controller.fast and robot.fast  # the zero-copy codec matched cyclonedds' serializer at start-up
        deadline = time.monotonic() + 2.0
        while (controller.matched() < 2 or robot.matched() < 1) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert controller.matched() == 2 and listener.matched() == 0  # a listener has no writer
        cmd = idl.MotorCommands.zeros()
        cmd.mode[:29], cmd.kp[:29], cmd.q[:29] = 1, 50.0, np.linspace(-0.5, 0.5, 29)
        image = idl.lowcmd_image(0, 5, cmd)
        controller.write(image)
        got = wait_for(robot.take)
        assert got.tobytes() == image.tobytes() and idl.crc_ok(got)
        assert wait_for(listener.take).tobytes() == image.tobytes()
        state = G1Emulator(EmulatorConfig()).lowstate()
        robot.write(state)
        back = wait_for(controller.take)
        assert back.tobytes() == state.tobytes() and idl.crc_ok(back)
        corrupt = np.frombuffer(state.tobytes(), np.uint8).copy()
        corrupt[100] ^= 0x01  # travels as it is: the CRC check is the receiver's
        robot.write(corrupt.view(idl.LOWSTATE_C).reshape(()))
        assert not idl.crc_ok(wait_for(controller.take))
        with pytest.raises(RuntimeError, match="only listens"):
            listener.write(image)
    finally:
        for p in (controller, robot, listener):
            p.close()
    with pytest.raises(ValueError, match=r"DDS domain id must be in \[0, 232\]"):
        UnitreeDds(233, "lo", None, idl.LOWSTATE_TOPIC)


def test_the_codec_self_check_covers_every_float_field() -> None:
    def count(dtype: np.dtype) -> int:
        return sum(int(np.prod(shape)) for _, shape in unitree_dds._float_fields(dtype))

    assert count(idl.LOWSTATE_C) == 35 * 5 + 4 + 3 + 3 + 3  # q dq ddq tau_est vol per motor; the IMU's four
    assert count(idl.LOWCMD_C) == 35 * 5  # q dq tau kp kd per motor
    fields = unitree_dds._float_fields(idl.LOWSTATE_C)
    image = np.zeros((), idl.LOWSTATE_C)
    for get, _ in fields:
        get(image)[...] = 1.5
    assert float(image["imu_state"]["quaternion"][2]) == 1.5 and float(image["motor_state"]["q"][34]) == 1.5
    assert unitree_dds._fast_path_ok(idl.LOWCMD_TOPIC) and unitree_dds._fast_path_ok(idl.LOWSTATE_TOPIC)


@pytest.fixture
def bridge_node(domain: int) -> Iterator[Any]:
    pytest.importorskip("rclpy")
    from helpers.ros_inprocess import ros_context

    from robot_rl.ros.unitree_bridge_node import UnitreeBridgeNode

    args = ["--ros-args", "-p", f"domain_id:={domain}", "-p", "network_interface:=lo", "-p", "ramp_time_s:=0.05",
            "-p", "link_timeout_s:=5.0", "-p", "command_timeout_s:=5.0"]
    with ros_context(args):
        node = UnitreeBridgeNode()
        try:
            yield node
        finally:
            node.close()
            node.destroy_node()


@pytest.mark.ros
@pytest.mark.realtime("none")  # in-process, on a private DDS domain
def test_bridge_node_publishes_the_robots_state_and_sends_crc_checked_commands(domain: int, bridge_node: Any) -> None:
    from helpers.ros_inprocess import capture, deliver
    from std_msgs.msg import Bool

    from robot_rl.ros.conversions import joint_state_to_msg

    node = bridge_node
    joints, imu, odom, modes = (capture(p) for p in (node.pub_joints, node.pub_imu, node.pub_odom, node.pub_mode))
    diagnostics = capture(node.diagnostics.publisher)
    node._publish()
    assert [m.data for m in modes] == ["waiting"] and not joints  # no LowState yet: nothing to publish
    assert diagnostics[-1].status[0].message.startswith("waiting")

    robot = UnitreeDds(domain, "lo", idl.LOWSTATE_TOPIC, idl.LOWCMD_TOPIC)
    emulator = G1Emulator(EmulatorConfig())
    try:
        state = emulator.lowstate()
        cmd = wait_for(robot.take, tick=lambda: robot.write(state))  # the bridge answers the robot's first state
        assert idl.crc_ok(cmd) and int(cmd["mode_machine"]) == int(state["mode_machine"])
        measured = state["motor_state"]["q"][:29].astype(np.float64)
        np.testing.assert_allclose(cmd["motor_cmd"]["q"][:29], measured, atol=1e-6)  # holds the measured pose
        node._publish()
        assert modes[-1].data in ("ramping", "hold")
        (js,) = joints
        assert list(js.name) == list(g1.JOINT_NAMES)
        np.testing.assert_allclose(js.position, measured, atol=1e-6)
        quat = state["imu_state"]["quaternion"]
        assert imu[0].orientation.w == pytest.approx(float(quat[0])) and imu[0].header.frame_id == "pelvis"
        assert odom[0].pose.pose.position.z == pytest.approx(0.79)  # the configured constant height
        node._publish()
        assert len(joints) == 1  # each LowState is published once

        target = g1.STAND_Q.copy()
        target[3] += 0.2
        deliver(node, "/target_joint", joint_state_to_msg(list(g1.JOINT_NAMES), target))
        active = wait_for(robot.take, lambda c: abs(float(c["motor_cmd"]["q"][3]) - target[3]) < 1e-6,
                          tick=lambda: robot.write(state))
        assert idl.crc_ok(active)
        beyond = target.copy()
        beyond[3] = 10.0  # far outside the knee's range: refused, the previous target keeps holding
        deliver(node, "/target_joint", joint_state_to_msg(list(g1.JOINT_NAMES), beyond))
        deliver(node, "/safety/estop", Bool(data=True))
        damped = wait_for(robot.take, lambda c: bool(np.all(c["motor_cmd"]["kp"][:29] == 0)),
                          tick=lambda: robot.write(state))
        assert np.all(damped["motor_cmd"]["kd"][:29] == node.config.damping_kd) and idl.crc_ok(damped)
        node._publish()
        assert modes[-1].data == "damping"
        values = {v.key: v.value for v in diagnostics[-1].status[0].values}
        assert values["mode"] == "damping" and values["rejected_targets"] == "1" and int(values["commands_sent"]) > 0
    finally:
        robot.close()
