"""A small vision-language-action policy: camera CNN + language features + a flow-matching action expert.

Trainable from scratch at small scale: the observation encoder (tiny CNN per camera with random shifts,
plus state) and the task text features are concatenated into the conditioning of the same rectified-flow
U-Net as :class:`~robot_rl.policies.flow.FlowPolicy`. The text encoder is resolved once ("auto": the
packaged MiniLM when installed, else hashing) and the resolved kind is saved in the config, so a
checkpoint only loads where its text encoder exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn

from robot_rl.core.spaces import SpecError
from robot_rl.policies.base import PolicyConfig, PolicySpec
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.policies.text import TextEncoder, minilm_available

AUX_HIDDEN = 64
"""Hidden units of the VLA's auxiliary head."""


@dataclass
class VLAConfig(FlowConfig):
    """VLA settings (flow-matching expert settings inherited)."""

    text_encoder: Literal["auto", "minilm", "hash"] = "auto"
    """Language features: packaged MiniLM (frozen), hashing bag-of-words, or auto (MiniLM if installed)."""
    text_dim: int = 32
    """Size of the language features fed to the action expert."""
    hash_buckets: int = 4096
    """Buckets of the hashing fallback."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.text_dim < 1 or self.hash_buckets < 1:
            raise ValueError("text_dim and hash_buckets must be >= 1")


class VLAPolicy(FlowPolicy):
    """Flow-matching action expert conditioned on cameras, state and the task text."""

    name: ClassVar[str] = "vla"
    config_cls: ClassVar[type[PolicyConfig]] = VLAConfig
    config: VLAConfig

    def __init__(self, config: PolicyConfig, spec: PolicySpec) -> None:
        if not isinstance(config, VLAConfig):
            raise TypeError(f"VLAPolicy needs a VLAConfig, got {type(config).__name__}")
        if not spec.image_shapes:
            raise SpecError("observation: the VLA needs at least one camera (image_keys)")
        if config.text_encoder == "auto":
            config = dataclasses.replace(config, text_encoder="minilm" if minilm_available() else "hash")
        super().__init__(config, spec)
        self.text = TextEncoder(self.config.text_encoder, self.config.text_dim, self.config.hash_buckets)
        self._text_features: torch.Tensor | None = None

    def build_aux_head(self) -> nn.Module:
        """An MLP over image and text features: which object the labels describe depends on the instruction."""
        image_dim = self.config.image_feature_dim * len(self.image_keys)
        return nn.Sequential(nn.Linear(image_dim + self.config.text_dim, AUX_HIDDEN), nn.ReLU(),
                             nn.Linear(AUX_HIDDEN, sum(self.spec.aux_dims.values())))

    def feature_dim(self) -> int:
        """Observation features plus language features."""
        return super().feature_dim() + self.config.text_dim

    def features(self, obs: Mapping[str, torch.Tensor], tasks: list[str] | None = None) -> torch.Tensor:
        """Observation encoding concatenated with the task text features."""
        base = super().features(obs, tasks)
        texts = list(tasks) if tasks is not None else [self.task] * base.shape[0]
        if len(texts) != base.shape[0]:
            raise SpecError(f"task: {len(texts)} task strings for a batch of {base.shape[0]}")
        self._text_features = self.text(texts)
        return torch.cat([base, self._text_features], dim=-1)

    def aux_inputs(self) -> torch.Tensor:
        """Image features and the instruction's features, for the auxiliary head.

        In a scene with a red and a blue cube the labels (the target's pose) are those of the cube the
        instruction names, so the head must read both (an MLP: choosing an object by the text is not linear).
        """
        assert self._text_features is not None
        return torch.cat([super().aux_inputs(), self._text_features], dim=-1)
