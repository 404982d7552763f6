"""Teleop devices fed through real file descriptors (pty, pipes) with the kernels' byte formats."""

from __future__ import annotations

import os
import pty
import struct

import numpy as np
import pytest

from robot_rl.core.spaces import SpecError
from robot_rl.teleop import EpisodeEvent, TeleopCommand, TeleopState
from robot_rl.teleop.devices import GamepadDevice, KeyboardDevice, SpaceMouseDevice


def test_keyboard_through_a_pty() -> None:
    leader, follower = pty.openpty()
    keyboard = KeyboardDevice(follower)
    try:
        os.write(leader, b"wwa gy")
        cmd = keyboard.poll()
        np.testing.assert_array_equal(cmd.linear, [1.0, 1.0, 0.0])  # two w presses clip to full speed
        assert cmd.intervention_toggle and cmd.gripper == 0.0 and cmd.events == (EpisodeEvent.SUCCESS,)
        idle = keyboard.poll()  # nothing pressed since: no motion, no toggle, no events
        assert not idle.linear.any() and not idle.intervention_toggle and idle.events == ()
        os.write(leader, b"jq")
        cmd = keyboard.poll()
        assert cmd.angular[2] == 1.0 and cmd.events == (EpisodeEvent.STOP,)
    finally:
        keyboard.close()
        os.close(leader)


def _js(value: int, kind: int, number: int) -> bytes:
    return struct.pack("<IhBB", 0, value, kind, number)


def test_gamepad_dead_man_switch_axes_and_buttons() -> None:
    r, w = os.pipe()
    pad = GamepadDevice(r)
    try:
        os.write(w, _js(0, 0x81, 4))  # init event: LB released
        assert not pad.poll().intervention_hold
        os.write(w, _js(1, 0x01, 4) + _js(-32767, 0x02, 1) + _js(1000, 0x02, 0))  # LB held, stick forward
        cmd = pad.poll()
        assert cmd.intervention_hold is True
        assert cmd.linear[0] == pytest.approx(1.0) and cmd.linear[1] == 0.0  # 1000/32767 is inside the deadzone
        event = _js(1, 0x01, 0)
        os.write(w, event[:5])  # a partial event stays pending until the rest arrives
        assert pad.poll().events == ()
        os.write(w, event[5:] + _js(1, 0x01, 5))
        cmd = pad.poll()
        assert cmd.events == (EpisodeEvent.SUCCESS,) and cmd.gripper == 0.0
        os.write(w, _js(0, 0x01, 4))  # LB released: control goes back to the policy
        assert pad.poll().intervention_hold is False
    finally:
        pad.close()
        os.close(w)


def test_spacemouse_reports() -> None:
    r, w = os.pipe()
    mouse = SpaceMouseDevice(r)
    try:
        os.write(w, bytes([1]) + struct.pack("<3h", 0, -350, 0) + bytes([2]) + struct.pack("<3h", 0, 0, 175))
        cmd = mouse.poll()
        np.testing.assert_allclose(cmd.linear, [1.0, 0.0, 0.0])
        np.testing.assert_allclose(cmd.angular, [0.0, 0.0, -0.5])
        os.write(w, bytes([3, 1]) + bytes([3, 3]))  # left pressed, then both pressed
        cmd = mouse.poll()
        assert cmd.intervention_toggle and cmd.gripper == 0.0
    finally:
        mouse.close()
        os.close(w)


def test_teleop_state_integrates_only_while_intervening() -> None:
    state = TeleopState(max_linear_speed=0.1, max_angular_speed=1.0)
    state.sync(np.array([0.5, 0.0, 0.3]), np.zeros(3))
    forward = TeleopCommand(linear=np.array([1.0, 0, 0]))
    state.apply(forward, dt=0.1)
    np.testing.assert_allclose(state.position, [0.5, 0.0, 0.3])  # policy in control: target untouched
    state.apply(TeleopCommand(intervention_toggle=True), dt=0.1)
    for _ in range(10):
        state.apply(forward, dt=0.1)
    np.testing.assert_allclose(state.position, [0.6, 0.0, 0.3], atol=1e-12)  # 0.1 m/s for 1 s
    yaw = TeleopCommand(angular=np.array([0, 0, 1.0]))
    for _ in range(10):
        state.apply(yaw, dt=np.pi / 20)
    np.testing.assert_allclose(np.abs(state.rotvec), [0, 0, np.pi / 2], atol=1e-9)
    with pytest.raises(SpecError, match=r"TeleopCommand\.linear"):
        TeleopCommand(linear=np.array([np.nan, 0, 0]))
    with pytest.raises(SpecError, match="gripper"):
        TeleopCommand(gripper=2.0)
