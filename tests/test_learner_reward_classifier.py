"""The learned success detector separates 'lifted' from 'on the table' frames it has not seen."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.spaces import SpecError
from robot_rl.learners.reward_classifier import RewardClassifier, RewardClassifierConfig


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
