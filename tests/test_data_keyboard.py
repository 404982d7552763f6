"""Keyboard recording without ROS: keys from a pipe drive the env; re-record and success keys end takes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.recorder import record
from robot_rl.teleop.keyboard_expert import KeyboardExpert


class Point(gym.Env):
    """A 3-D point moved by an end-effector delta with a gripper: action (dx, dy, dz, gripper)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-10, 10, (3,), np.float64)
        self.action_space = gym.spaces.Box(np.array([-0.1, -0.1, -0.1, 0.0], np.float32),
                                           np.array([0.1, 0.1, 0.1, 0.08], np.float32),
                                           dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        self.pos = np.zeros(3)
        return self.pos.copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.pos = self.pos + action[:3]
        return self.pos.copy(), 0.0, False, False, {}


class KeysAt(gym.Wrapper):
    """Types ``script[(take, step)]`` into the keyboard pipe after that env step."""

    def __init__(self, env: gym.Env, fd: int, script: dict[tuple[int, int], str]) -> None:
        super().__init__(env)
        self.fd, self.script, self.take, self.t = fd, script, -1, 0

    def reset(self, **kwargs: Any) -> Any:
        self.take, self.t = self.take + 1, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.t += 1
        os.write(self.fd, self.script.get((self.take, self.t), "").encode())
        return out


@pytest.fixture
def pipe() -> Any:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_key_mapping_respects_bounds(pipe: tuple[int, int]) -> None:
    r, w = pipe
    expert = KeyboardExpert(Point(), fd=r, fps=1000.0, echo=False)
    os.write(w, b"wwr")  # +x twice (clipped to full deflection), +z once
    np.testing.assert_allclose(expert.act(None), [0.1, 0.0, 0.1, 0.08], atol=1e-7)
    os.write(w, b"dg")  # -y, gripper closes
    np.testing.assert_allclose(expert.act(None), [0.0, -0.1, 0.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(expert.act(None), [0.0, 0.0, 0.0, 0.0], atol=1e-7)  # no key: hold still


def test_keyboard_takes_rerecord_and_success(pipe: tuple[int, int], tmp_path: Path) -> None:
    r, w = pipe
    os.write(w, b"w")
    env = KeysAt(Point(), w, {(0, 1): "w", (0, 2): "b", (1, 1): "a", (1, 2): "r", (1, 4): "y"})
    expert = KeyboardExpert(env, fd=r, fps=1000.0, echo=False)
    store = EpisodeStore.create(tmp_path / "k.zarr", DatasetInfo(robot="point", fps=10.0, task="keys"))
    report = record(env, expert, store, episodes=1, progress=False)
    assert report.rerecorded == 1 and report.successes == [True] and report.lengths == [5]
    assert store.num_frames == 5  # the discarded take left nothing
    steps = list(store.transitions(0))
    assert all(s.is_intervention and s.segment_source.value == "human" for s in steps)
    np.testing.assert_allclose(steps[1].action[:3], [0.0, 0.1, 0.0], atol=1e-7)  # "a" = +y
    np.testing.assert_allclose(steps[2].action[:3], [0.0, 0.0, 0.1], atol=1e-7)  # "r" = +z
    assert steps[-1].truncated and not steps[-1].terminated
