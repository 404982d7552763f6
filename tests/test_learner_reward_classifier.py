"""The learned success detector separates 'lifted' from 'on the table' frames it has not seen."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.core.spaces import SpecError
from robot_rl.learners.reward_classifier import LearnedSuccess, RewardClassifier, RewardClassifierConfig


def frames(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """32x32 scenes: grey table, a red 6 px cube somewhere; success = the cube is in the upper third."""
    rng = np.random.default_rng(seed)
    images = np.full((n, 32, 32, 3), 90, np.uint8)
    images[:, 24:] = 140  # table
    images += rng.integers(0, 20, images.shape, dtype=np.uint8)  # sensor noise
    labels = rng.integers(0, 2, n)
    for i in range(n):
        y = rng.integers(1, 9) if labels[i] else rng.integers(14, 24)
        x = rng.integers(2, 24)
        images[i, y:y + 6, x:x + 6] = (200, 30, 30)
    return images, labels


def test_classifier_generalises_and_round_trips(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    train_x, train_y = frames(300, seed=0)
    test_x, test_y = frames(200, seed=1)
    model = RewardClassifier(RewardClassifierConfig(image_keys=["front"], threshold=0.85), {"front": (32, 32, 3)})
    chance = model.accuracy({"front": test_x}, test_y)
    metrics = model.fit({"front": train_x}, train_y, steps=150)
    held_out = model.accuracy({"front": test_x}, test_y)
    print(f"held-out accuracy {chance:.2f} -> {held_out:.2f} (train {metrics['accuracy']:.2f})")
    assert held_out >= 0.95
    lifted = test_x[test_y == 1][0]
    assert isinstance(model.is_success({"front": lifted}), bool)
    again = RewardClassifier.load(model.save(tmp_path / "clf"))
    assert np.allclose(again.predict_proba({"front": test_x}), model.predict_proba({"front": test_x}), atol=1e-6)


def test_bad_input() -> None:
    model = RewardClassifier(RewardClassifierConfig(image_keys=["front"]), {"front": (32, 32, 3)})
    x, _ = frames(10, 0)
    with pytest.raises(SpecError, match="uint8"):
        model.predict_proba({"front": x.astype(np.float32)})
    with pytest.raises(SpecError, match="front"):
        model.predict_proba({"wrist": x})
    with pytest.raises(SpecError, match="both"):
        model.fit({"front": x}, np.ones(10, int), steps=1)
    with pytest.raises(SpecError, match="labels"):
        model.fit({"front": x}, np.full(10, 2), steps=1)
    with pytest.raises(ValueError, match="threshold"):
        RewardClassifierConfig(threshold=1.0)


class Lift(gym.Env):
    """A cube that rises 2 px per step in a 32x32 frame; the simulator says success in the upper third."""

    observation_space = gym.spaces.Dict({"image_front": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)})
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        img = np.full((32, 32, 3), 90, np.uint8)
        img[24:] = 140
        img[self.y:self.y + 6, 12:18] = (200, 30, 30)
        return {"image_front": img}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.y = 20
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        self.y = max(1, self.y - 2)
        return self._obs(), 0.0, False, self.y == 1, {"is_success": bool(self.y < 9), "y": self.y}


def test_learned_success_replaces_the_simulators_verdict() -> None:
    torch.set_num_threads(1)
    model = RewardClassifier(RewardClassifierConfig(image_keys=["front"], threshold=0.5), {"front": (32, 32, 3)})
    train_x, train_y = frames(300, seed=0)
    model.fit({"front": train_x}, train_y, steps=150)
    env = LearnedSuccess(Lift(), model)
    env.reset()
    verdicts = []
    for _ in range(10):
        _, _, _, truncated, info = env.step(np.zeros(1, np.float32))
        verdicts.append((info["is_success"], info["sim_is_success"], info["y"]))
        if truncated:
            break
    assert [s for _, s, _ in verdicts] == [False] * 5 + [True] * 5  # the cube enters the upper third at step 6
    clear = [(learned, sim) for learned, sim, y in verdicts if y < 9 or y >= 14]  # heights it was trained on
    assert len(clear) == 8 and all(learned == sim for learned, sim in clear)
    assert env.agreed + env.disagreed == len(verdicts)
    no_camera = LearnedSuccess(gym.make("robot_rl/ArmPickLift-v0"), model)
    no_camera.reset(seed=0)
    with pytest.raises(SpecError, match="needs camera 'front'"):
        no_camera.step(np.zeros(7, np.float32))
