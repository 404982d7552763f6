"""Drive a simulator from the terminal keyboard while recording (no ROS, no GUI).

Keys come from :class:`robot_rl.teleop.devices.KeyboardDevice` (w/s a/d r/f move, u/o i/k j/l rotate,
g toggles the gripper; y success, n failure, b re-record, q stop). Every step polls the keys and
paces itself to the control rate. The twist maps onto the env's action vector by position: the
first up-to-3 entries get the linear command, the next up-to-3 the angular one (each scaled to the
action bounds), and when the action has 4 or 7 entries the last one is the gripper, mapped from
[0 closed, 1 open] onto its bounds. That fits end-effector-delta arms; other envs need their own expert.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from robot_rl.teleop.command import EpisodeEvent
from robot_rl.teleop.devices import KEYBOARD_HELP, KeyboardDevice


class KeyboardExpert:
    """A human at the terminal as the recorder's expert (steps are stored as human interventions)."""

    is_human = True

    def __init__(self, env: Any, fd: int | None = None, fps: float | None = None, echo: bool = True) -> None:
        space = env.action_space
        if len(space.shape) != 1:
            raise ValueError(f"keyboard control needs a 1-D action space, got shape {space.shape}")
        if fd is None:
            if not sys.stdin.isatty():
                raise RuntimeError("keyboard recording needs an interactive terminal on stdin")
            fd = sys.stdin.fileno()
        self.device = KeyboardDevice(fd, owns_fd=False)
        self.low = np.asarray(space.low, np.float64)
        self.high = np.asarray(space.high, np.float64)
        dt = getattr(env.unwrapped, "dt", None)
        self.period = 1.0 / fps if fps else (float(dt) if isinstance(dt, (int, float)) and dt > 0 else 0.1)
        self.echo = echo
        self.gripper = 1.0
        self.wants_rerecord = False
        self.episode_done = False
        self.outcome: bool | None = None
        self.stop_requested = False
        self._last = 0.0

    def reset(self) -> None:
        """Start a take: clear the episode flags and show the keys."""
        self.wants_rerecord = self.episode_done = False
        self.outcome = None
        self.device.poll()  # drop keys pressed between episodes
        if self.echo:
            print(KEYBOARD_HELP, flush=True)
        self._last = time.perf_counter()

    def act(self, obs: Any) -> np.ndarray:
        """Wait for the next control tick, read the keys, return the action."""
        delay = self.period - (time.perf_counter() - self._last)
        if delay > 0:
            time.sleep(delay)
        self._last = time.perf_counter()
        cmd = self.device.poll()
        if cmd.gripper is not None:
            self.gripper = cmd.gripper
        for event in cmd.events:
            if event is EpisodeEvent.RERECORD:
                self.wants_rerecord = True
            elif event in (EpisodeEvent.SUCCESS, EpisodeEvent.FAILURE):
                self.episode_done, self.outcome = True, event is EpisodeEvent.SUCCESS
            elif event is EpisodeEvent.STOP:
                self.episode_done = self.stop_requested = True
        return self.map_twist(cmd.linear, cmd.angular, self.gripper)

    def map_twist(self, linear: np.ndarray, angular: np.ndarray, gripper: float) -> np.ndarray:
        """Twist in [-1, 1] and gripper in [0, 1] -> an action within the bounds (see module docstring)."""
        n = self.low.size
        has_gripper = n in (4, 7)
        motion = n - int(has_gripper)
        twist = np.concatenate([linear[: min(3, motion)], angular[: max(0, min(3, motion - 3))]])
        action = np.zeros(n)
        half = np.where(np.isfinite(self.high - self.low), (self.high - self.low) / 2, 1.0)
        mid = np.where(np.isfinite(self.high + self.low), (self.high + self.low) / 2, 0.0)
        action[: twist.size] = mid[: twist.size] + twist * half[: twist.size]
        if has_gripper:
            action[-1] = self.low[-1] + gripper * (self.high[-1] - self.low[-1]) if np.isfinite(
                self.high[-1] - self.low[-1]) else gripper
        return np.clip(action, self.low, self.high).astype(np.float32)

    def close(self) -> None:
        """Give the terminal its settings back."""
        self.device.close()
