"""Observation encoders: normalised state history plus a tiny CNN per camera with random-shift augmentation.

The output is one flat conditioning vector per sample, which the action networks take through FiLM.
Images come in as uint8 (B, T, H, W, C) exactly as the dataset stores them; the scaling to [0, 1] and the
augmentation (DrQ-style random shifts by up to ``pad`` pixels, training only) happen here.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.nn import functional as F


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image (N, C, H, W) by a random integer offset in [-pad, pad] (edges replicated)."""
    if pad <= 0:
        return images
    n, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=images.device)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device=images.device)
    rows = (oy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]
    cols = (ox[:, None] + torch.arange(w, device=images.device))[:, None, None, :]
    batch = torch.arange(n, device=images.device)[:, None, None, None]
    chan = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return padded[batch, chan, rows, cols]


class SpatialSoftmax(nn.Module):
    """(N, K, H, W) feature maps -> (N, 2K): where each map's softmax puts its mass, x then y in [-1, 1].

    Global average pooling keeps what a map saw but not where; a policy that has to reach an object needs
    the where (the keypoints of Levine et al. 2016, used by robomimic and Diffusion Policy).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Expected image coordinates of each feature map."""
        n, k, h, w = x.shape
        attention = torch.softmax(x.flatten(2), dim=-1).view(n, k, h, w)
        ys = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype)
        return torch.cat([(attention.sum(2) * xs).sum(-1), (attention.sum(3) * ys).sum(-1)], dim=1)


class TinyCNN(nn.Module):
    """Three strided convolutions, keypoints and average-pooled appearance, a linear layer.

    (N, C, H, W) -> (N, out_dim).
    """

    def __init__(self, in_channels: int, out_dim: int, width: int = 32) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stride=2, padding=1), nn.GroupNorm(8, width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.GroupNorm(8, width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.GroupNorm(8, 2 * width), nn.ReLU())
        self.keypoints = SpatialSoftmax()
        self.out = nn.Linear(6 * width, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) float in [0, 1] -> (N, out_dim)."""
        maps = self.conv(x)
        return self.out(torch.cat([self.keypoints(maps), maps.mean(dim=(2, 3))], dim=1))


class ObsEncoder(nn.Module):
    """(normalised states, uint8 images) over ``n_obs_steps`` -> one conditioning vector (B, out_dim)."""

    def __init__(self, state_dims: Mapping[str, int], image_shapes: Mapping[str, tuple[int, int, int]],
                 n_obs_steps: int, image_feature_dim: int = 64, crop_pad: int = 4) -> None:
        super().__init__()
        self.state_keys = list(state_dims)
        self.image_keys = list(image_shapes)
        self.crop_pad = crop_pad
        self.cnns = nn.ModuleDict({key.replace(".", "__"): TinyCNN(shape[-1], image_feature_dim)
                                   for key, shape in image_shapes.items()})
        self.out_dim = n_obs_steps * (sum(state_dims.values()) + image_feature_dim * len(self.image_keys))
        self.image_features: torch.Tensor | None = None
        """The last forward's camera features at the current (last) step, (B, cameras * image_feature_dim): what
        an auxiliary head reads (:meth:`robot_rl.policies.base.Policy.aux_loss`)."""

    def forward(self, states: Mapping[str, torch.Tensor], images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """states: key -> (B, T, d) normalised; images: key -> (B, T, H, W, C) uint8."""
        parts = [states[k] for k in self.state_keys]
        current = []
        for key in self.image_keys:
            img = images[key]
            b, t = img.shape[:2]
            x = img.reshape(b * t, *img.shape[2:]).permute(0, 3, 1, 2).float() / 255.0
            if self.training:
                x = random_shift(x, self.crop_pad)
            features = self.cnns[key.replace(".", "__")](x).reshape(b, t, -1)
            parts.append(features)
            current.append(features[:, -1])
        self.image_features = torch.cat(current, dim=-1) if current else None
        return torch.cat(parts, dim=-1).flatten(1)
