"""A learned success detector: a small CNN trained on labelled camera frames (HIL-SERL's reward classifier).

On a real robot there is no simulator to say "success"; a person labels a few hundred frames and this
classifier gives the sparse reward. It is an option beside the simulator's ``is_success``
(:class:`LearnedSuccess` wraps an env; actors use it with ``actor.success_detector``). HIL-SERL
reports ~97 % accuracy and uses a high threshold (0.85) so that false successes, which end episodes
early and teach the wrong thing, stay rare; ``threshold`` is configurable for that reason.
Checkpoints are safetensors + JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn import functional as F

from robot_rl.core.config import config_to_dict, load_config
from robot_rl.core.device import check_device_name, resolve_device
from robot_rl.core.spaces import SpecError
from robot_rl.policies.encoders import TinyCNN, random_shift


@dataclass
class RewardClassifierConfig:
    """Classifier and training settings."""

    image_keys: list[str] = field(default_factory=lambda: ["front"])
    """Camera keys whose uint8 (H, W, C) frames are classified (features concatenated)."""
    feature_dim: int = 32
    """CNN features per camera."""
    width: int = 16
    """Channels of the CNN's first convolution."""
    lr: float = 1e-3
    """Adam learning rate."""
    batch_size: int = 64
    """Frames per step."""
    crop_pad: int = 2
    """Random-shift augmentation in pixels (training only)."""
    threshold: float = 0.85
    """Success probability above which :meth:`RewardClassifier.is_success` says yes."""
    seed: int = 0
    """Seed of initialisation and batch sampling."""
    device: str = "auto"
    """Where it trains and classifies: "auto" (CUDA when available, else CPU), "cpu" or "cuda"."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        if not self.image_keys:
            raise ValueError("image_keys: name at least one camera")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold: must be in (0, 1), got {self.threshold}")
        if self.feature_dim < 1 or self.width < 1 or self.batch_size < 1 or self.crop_pad < 0 or self.lr <= 0:
            raise ValueError("feature_dim, width, batch_size must be >= 1, crop_pad >= 0, lr > 0")


class RewardClassifier(nn.Module):
    """P(success | frames): one TinyCNN per camera, a linear head on the concatenated features."""

    def __init__(self, config: RewardClassifierConfig, image_shapes: Mapping[str, tuple[int, int, int]]) -> None:
        super().__init__()
        missing = [k for k in config.image_keys if k not in image_shapes]
        if missing:
            raise SpecError(f"observation: camera(s) {missing} have no image shape")
        torch.manual_seed(config.seed)
        self.config = config
        self.image_shapes = {k: tuple(int(s) for s in image_shapes[k]) for k in config.image_keys}
        self.cnns = nn.ModuleDict({k: TinyCNN(self.image_shapes[k][2], config.feature_dim, config.width)
                                   for k in config.image_keys})
        self.head = nn.Linear(config.feature_dim * len(config.image_keys), 1)
        self.device = resolve_device(config.device)
        """Where the classifier lives (frames are moved there)."""
        self.to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        """Random shifts are drawn on the classifier's device (a generator serves one device only)."""

    def _images(self, frames: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        out = {}
        for key, shape in self.image_shapes.items():
            if key not in frames:
                raise SpecError(f"observation.{key}: missing")
            arr = np.asarray(frames[key])
            if arr.dtype != np.uint8:
                raise SpecError(f"observation.{key}: frames must be uint8, got {arr.dtype}")
            if arr.shape == shape:
                arr = arr[None]
            if arr.shape[1:] != shape:
                raise SpecError(f"observation.{key}: expected (H, W, C) = {shape} or a batch of them, got {arr.shape}")
            out[key] = torch.from_numpy(np.ascontiguousarray(arr)).to(self.device, non_blocking=True)
        return out

    def forward(self, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Success logits (B,) from uint8 frames {key: (B, H, W, C)}."""
        feats = []
        for key, cnn in self.cnns.items():
            x = images[key].permute(0, 3, 1, 2).float() / 255.0
            if self.training and self.config.crop_pad:
                x = random_shift(x, self.config.crop_pad, self.generator)
            feats.append(cnn(x))
        return self.head(torch.cat(feats, -1)).squeeze(-1)

    def fit(self, frames: Mapping[str, np.ndarray], labels: np.ndarray, steps: int) -> dict[str, float]:
        """Train on labelled frames {key: (N, H, W, C)} with labels (N,) in {0, 1}; classes are balanced."""
        images = self._images(frames)
        y = np.asarray(labels)
        n = len(next(iter(images.values())))
        if y.shape != (n,) or not np.isin(y, (0, 1)).all():
            raise SpecError(f"labels: expected {n} values in {{0, 1}}, got shape {y.shape}")
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        if not len(pos) or not len(neg):
            raise SpecError("labels: need both successful and unsuccessful frames")
        rng = np.random.default_rng(self.config.seed)
        opt = torch.optim.Adam(self.parameters(), lr=self.config.lr)
        target = torch.from_numpy(y.astype(np.float32)).to(self.device)
        self.train()
        half = max(1, self.config.batch_size // 2)
        loss = torch.zeros((), device=self.device)
        for _ in range(steps):
            idx = torch.from_numpy(np.r_[rng.choice(pos, half), rng.choice(neg, half)]).to(self.device)
            loss = F.binary_cross_entropy_with_logits(self({k: v[idx] for k, v in images.items()}), target[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.eval()
        return {"loss": float(loss.detach()), "accuracy": self.accuracy(frames, y)}

    @torch.no_grad()
    def predict_proba(self, frames: Mapping[str, Any]) -> np.ndarray:
        """Success probabilities (B,) for a batch of frames, or (1,) for one frame per camera."""
        was = self.training
        self.eval()
        try:
            return torch.sigmoid(self(self._images(frames))).cpu().numpy()
        finally:
            self.train(was)

    def is_success(self, frames: Mapping[str, Any]) -> bool:
        """One observation: is the success probability above the threshold?"""
        return bool(self.predict_proba(frames)[0] > self.config.threshold)

    def accuracy(self, frames: Mapping[str, np.ndarray], labels: np.ndarray) -> float:
        """Share of frames classified correctly at the 0.5 decision boundary."""
        return float(np.mean((self.predict_proba(frames) > 0.5) == np.asarray(labels).astype(bool)))

    def save(self, folder: str | Path) -> Path:
        """``classifier.safetensors`` + ``classifier.json`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  str(folder / "classifier.safetensors"))
        meta = {"format": "robot_rl.reward_classifier", "config": config_to_dict(self.config),
                "image_shapes": {k: list(v) for k, v in self.image_shapes.items()}}
        (folder / "classifier.json").write_text(json.dumps(meta), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: str | None = None) -> RewardClassifier:
        """Inverse of :meth:`save`, on ``device`` when given (else the saved config's)."""
        folder = Path(folder)
        meta = json.loads((folder / "classifier.json").read_text(encoding="utf-8"))
        if meta.get("format") != "robot_rl.reward_classifier":
            raise SpecError(f"{folder}: not a reward classifier checkpoint")
        shapes = {k: (int(v[0]), int(v[1]), int(v[2])) for k, v in meta["image_shapes"].items()}
        config = load_config(RewardClassifierConfig, meta["config"])
        if device is not None:
            config = dataclasses.replace(config, device=device)
        model = cls(config, shapes)
        model.load_state_dict(load_file(str(folder / "classifier.safetensors")), strict=True)
        model.eval()
        return model


class LearnedSuccess(gym.Wrapper):
    """Replaces ``info["is_success"]`` with the classifier's verdict on the observation's camera frames.

    What an actor on a real robot has instead of the simulator: the simulator's own answer stays in
    ``info["sim_is_success"]`` so the detector's mistakes can be counted in simulation. The classifier's
    camera ``front`` is read from the observation key ``front`` or ``image_front``.
    """

    def __init__(self, env: gym.Env, classifier: RewardClassifier) -> None:
        super().__init__(env)
        self.classifier = classifier
        self.agreed = 0
        self.disagreed = 0
        """Steps where the classifier and the simulator agreed / disagreed about success."""

    def _frames(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        frames = {}
        for key in self.classifier.config.image_keys:
            name = key if key in obs else f"image_{key}"
            if name not in obs:
                raise SpecError(f"observation: the success detector needs camera {key!r}; make the env with it "
                                f"(e.g. cameras=[{key!r}])")
            frames[key] = obs[name]
        return frames

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Step, then judge success from the new frames."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        sim = bool(info.get("is_success", False))
        learned = self.classifier.is_success(self._frames(obs))
        self.agreed += int(learned == sim)
        self.disagreed += int(learned != sim)
        info["sim_is_success"], info["is_success"] = sim, learned
        return obs, reward, terminated, truncated, info
