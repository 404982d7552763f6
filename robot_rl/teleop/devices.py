"""Teleop device readers: terminal keyboard, Linux joystick (gamepad) and 3Dconnexion spacemouse.

Each reader owns a non-blocking file descriptor and turns whatever bytes are waiting into one
:class:`TeleopCommand` per :meth:`poll`. They use only the kernel interfaces (a tty, ``/dev/input/js*``,
``/dev/hidraw*``), so they need no extra libraries and tests can feed them from a pipe or a pty.
"""

from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.teleop.command import EpisodeEvent, TeleopCommand


class TeleopDevice(ABC):
    """A device behind a file descriptor; :meth:`poll` never blocks."""

    def __init__(self, fd: int, owns_fd: bool = True) -> None:
        self.fd = fd
        self._owns_fd = owns_fd
        os.set_blocking(fd, False)

    def _read_available(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    @abstractmethod
    def poll(self) -> TeleopCommand:
        """Everything that arrived since the last poll, as one command."""

    def close(self) -> None:
        """Close the descriptor if this reader opened it."""
        if self._owns_fd:
            os.close(self.fd)


# -- keyboard -------------------------------------------------------------------------------------

KEY_AXES = {
    "w": ("linear", 0, 1), "s": ("linear", 0, -1), "a": ("linear", 1, 1), "d": ("linear", 1, -1),
    "r": ("linear", 2, 1), "f": ("linear", 2, -1), "u": ("angular", 0, 1), "o": ("angular", 0, -1),
    "i": ("angular", 1, 1), "k": ("angular", 1, -1), "j": ("angular", 2, 1), "l": ("angular", 2, -1),
}
KEY_EVENTS = {"y": EpisodeEvent.SUCCESS, "n": EpisodeEvent.FAILURE, "b": EpisodeEvent.RERECORD,
              "q": EpisodeEvent.STOP}
KEYBOARD_HELP = ("w/s a/d r/f: move x/y/z   u/o i/k j/l: roll/pitch/yaw   space: take/give control   "
                 "g: gripper open/close   y: success   n: failure   b: re-record   q: stop")


class KeyboardDevice(TeleopDevice):
    """Single key presses from a terminal; each press moves for one tick (terminals send no releases)."""

    def __init__(self, fd: int, owns_fd: bool = True) -> None:
        super().__init__(fd, owns_fd)
        self._gripper_open = True
        self._saved_tty: list[Any] | None = None
        if os.isatty(fd):
            import termios
            import tty

            self._saved_tty = termios.tcgetattr(fd)
            tty.setcbreak(fd, termios.TCSANOW)  # keys arrive without Enter, no echo

    def close(self) -> None:
        """Give the terminal its settings back, then close."""
        if self._saved_tty is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved_tty)
        super().close()

    def poll(self) -> TeleopCommand:
        """Fold the pending key presses into one command."""
        linear, angular = np.zeros(3), np.zeros(3)
        toggle, gripper, events = False, None, []
        for key in self._read_available().decode(errors="ignore").lower():
            if key in KEY_AXES:
                group, axis, sign = KEY_AXES[key]
                (linear if group == "linear" else angular)[axis] += sign
            elif key == " ":
                toggle = not toggle
            elif key == "g":
                self._gripper_open = not self._gripper_open
                gripper = 1.0 if self._gripper_open else 0.0
            elif key in KEY_EVENTS:
                events.append(KEY_EVENTS[key])
        return TeleopCommand(linear, angular, gripper, intervention_toggle=toggle, events=tuple(events))


# -- gamepad (Linux joystick API: struct js_event {u32 time; s16 value; u8 type; u8 number}) ------

_JS_EVENT = struct.Struct("<IhBB")
_JS_BUTTON, _JS_AXIS, _JS_INIT = 0x01, 0x02, 0x80


@dataclass(frozen=True)
class GamepadMapping:
    """Axis and button numbers (defaults: Xbox-style pads under the Linux xpad driver)."""

    linear_x_axis: int = 1
    """Left stick vertical -> x (pushed forward = +x)."""
    linear_y_axis: int = 0
    """Left stick horizontal -> y (left = +y)."""
    linear_z_axis: int = 4
    """Right stick vertical -> z (up = +z)."""
    yaw_axis: int = 3
    """Right stick horizontal -> yaw."""
    deadzone: float = 0.1
    """Stick deflection below this counts as zero."""
    hold_to_intervene_button: int = 4
    """LB: the human is in control while it is held (a dead-man switch)."""
    gripper_button: int = 5
    """RB: toggle the gripper."""
    success_button: int = 0
    """A."""
    failure_button: int = 1
    """B."""
    rerecord_button: int = 2
    """X."""
    stop_button: int = 7
    """Start."""


class GamepadDevice(TeleopDevice):
    """A gamepad read through ``/dev/input/js*``; intervention is hold-to-control (dead-man)."""

    def __init__(self, fd: int, mapping: GamepadMapping | None = None, owns_fd: bool = True) -> None:
        super().__init__(fd, owns_fd)
        self.mapping = mapping or GamepadMapping()
        self.axes: dict[int, float] = {}
        self.buttons: dict[int, bool] = {}
        self._gripper_open = True
        self._pending = b""

    def poll(self) -> TeleopCommand:
        """Apply pending joystick events; button presses (not releases) trigger events."""
        data = self._pending + self._read_available()
        usable = len(data) - len(data) % _JS_EVENT.size
        self._pending = data[usable:]
        m, gripper, events = self.mapping, None, []
        event_buttons = {m.success_button: EpisodeEvent.SUCCESS, m.failure_button: EpisodeEvent.FAILURE,
                         m.rerecord_button: EpisodeEvent.RERECORD, m.stop_button: EpisodeEvent.STOP}
        for _, value, kind, number in _JS_EVENT.iter_unpack(data[:usable]):
            if kind & _JS_AXIS:
                self.axes[number] = value / 32767.0
            elif kind & _JS_BUTTON:
                pressed = value != 0
                was = self.buttons.get(number, False)
                self.buttons[number] = pressed
                if kind & _JS_INIT or not pressed or was:
                    continue
                if number == m.gripper_button:
                    self._gripper_open = not self._gripper_open
                    gripper = 1.0 if self._gripper_open else 0.0
                elif number in event_buttons:
                    events.append(event_buttons[number])

        def axis(n: int, sign: float = 1.0) -> float:
            v = self.axes.get(n, 0.0)
            return 0.0 if abs(v) < m.deadzone else sign * v

        # Linux joystick axes are +down / +right: flip so forward/left/up are positive.
        linear = np.array([axis(m.linear_x_axis, -1), axis(m.linear_y_axis, -1), axis(m.linear_z_axis, -1)])
        angular = np.array([0.0, 0.0, axis(m.yaw_axis, -1)])
        return TeleopCommand(linear, angular, gripper, intervention_hold=self.buttons.get(m.hold_to_intervene_button,
                                                                                           False),
                             events=tuple(events))


# -- spacemouse (3Dconnexion HID reports through /dev/hidraw*) -------------------------------------

class SpaceMouseDevice(TeleopDevice):
    """6-DoF input from a 3Dconnexion SpaceMouse.

    HID reports: 1 = translation (3 x int16), 2 = rotation, 3 = buttons; newer models
    (``combined_report=True``) send all six axes in report 1. Left button toggles control, right button
    toggles the gripper.
    """

    FULL_SCALE = 350.0

    def __init__(self, fd: int, owns_fd: bool = True, combined_report: bool = False) -> None:
        super().__init__(fd, owns_fd)
        self.combined_report = combined_report
        self.translation = np.zeros(3)
        self.rotation = np.zeros(3)
        self._buttons = 0
        self._gripper_open = True

    def poll(self) -> TeleopCommand:
        """Parse pending HID reports (7 or 13 bytes each, starting with the report id)."""
        data = self._read_available()
        toggle, gripper = False, None
        i = 0
        while i < len(data):
            report = data[i]
            if report == 1 and self.combined_report and len(data) - i >= 13:
                six = np.array(struct.unpack_from("<6h", data, i + 1), dtype=np.float64)
                self.translation, self.rotation = six[:3], six[3:]
                i += 13
            elif report in (1, 2) and len(data) - i >= 7:
                values = np.array(struct.unpack_from("<3h", data, i + 1), dtype=np.float64)
                if report == 1:
                    self.translation = values
                else:
                    self.rotation = values
                i += 7
            elif report == 3 and len(data) - i >= 2:
                buttons = data[i + 1]
                pressed = buttons & ~self._buttons
                self._buttons = buttons
                toggle ^= bool(pressed & 0x1)
                if pressed & 0x2:
                    self._gripper_open = not self._gripper_open
                    gripper = 1.0 if self._gripper_open else 0.0
                i += 2
            else:
                break  # unknown or partial report: drop the rest of this read
        # Device frame (x right, y forward... as reported, z down) -> robot base frame (x forward, y left, z up).
        t, r = self.translation / self.FULL_SCALE, self.rotation / self.FULL_SCALE
        linear = np.array([-t[1], -t[0], -t[2]])
        angular = np.array([-r[1], -r[0], -r[2]])
        return TeleopCommand(linear, angular, gripper, intervention_toggle=toggle)


def open_device(kind: str, path: str) -> TeleopDevice:
    """Open a device of ``kind`` (keyboard | gamepad | spacemouse) at ``path`` (a tty, js or hidraw node)."""
    if kind not in ("keyboard", "gamepad", "spacemouse"):
        raise ValueError(f"unknown teleop device {kind!r}; use keyboard, gamepad or spacemouse")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if kind == "keyboard":
        return KeyboardDevice(fd)
    if kind == "gamepad":
        return GamepadDevice(fd)
    return SpaceMouseDevice(fd)
