"""Per-key affine normalisation whose statistics live in the policy's state dict.

Keeping the scale/offset as buffers (as diffusion_policy's LinearNormalizer does) means one safetensors
file carries both the weights and the dataset statistics, so a checkpoint can never be run with
statistics from another dataset.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

MIN_RANGE = 1e-4
"""Ranges (max - min) or standard deviations below this count as constant features (scale 1)."""


def _buffer_name(key: str) -> str:
    return key.replace(".", "__")


class Normalizer(nn.Module):
    """``normalize(key, x) = x * scale + offset``; "minmax" maps [min, max] to [-1, 1], "meanstd" to z-scores."""

    def __init__(self, dims: Mapping[str, int], modes: Mapping[str, str]) -> None:
        super().__init__()
        self.keys = list(dims)
        self.modes = dict(modes)
        for key, dim in dims.items():
            if self.modes.get(key) not in ("minmax", "meanstd"):
                raise ValueError(f"normalizer.{key}: mode must be 'minmax' or 'meanstd', got {self.modes.get(key)!r}")
            self.register_buffer(f"{_buffer_name(key)}__scale", torch.ones(dim))
            self.register_buffer(f"{_buffer_name(key)}__offset", torch.zeros(dim))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    fitted: torch.Tensor

    def fit(self, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Set scale/offset from dataset statistics ({key: {"min","max","mean","std"}})."""
        for key in self.keys:
            if key not in stats:
                raise KeyError(f"normalizer.{key}: no statistics for this key (have {sorted(stats)})")
            s = stats[key]
            scale_buf, offset_buf = self._buffers_of(key)
            if self.modes[key] == "minmax":
                lo = np.asarray(s["min"], dtype=np.float64).reshape(-1)
                hi = np.asarray(s["max"], dtype=np.float64).reshape(-1)
                rng = hi - lo
                const = rng < MIN_RANGE
                scale = np.where(const, 1.0, 2.0 / np.where(const, 1.0, rng))
                offset = np.where(const, -lo, -1.0 - lo * scale)
            else:
                mean = np.asarray(s["mean"], dtype=np.float64).reshape(-1)
                std = np.asarray(s["std"], dtype=np.float64).reshape(-1)
                scale = 1.0 / np.maximum(std, MIN_RANGE)
                offset = -mean * scale
            finite = np.all(np.isfinite(scale)) and np.all(np.isfinite(offset))
            if scale.shape != tuple(scale_buf.shape) or not finite:
                raise ValueError(f"normalizer.{key}: statistics have shape {scale.shape} or non-finite values, "
                                 f"expected finite values of shape {tuple(scale_buf.shape)}")
            scale_buf.copy_(torch.as_tensor(scale, dtype=torch.float32))
            offset_buf.copy_(torch.as_tensor(offset, dtype=torch.float32))
        self.fitted.fill_(True)

    def _buffers_of(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        name = _buffer_name(key)
        return getattr(self, f"{name}__scale"), getattr(self, f"{name}__offset")

    def mean_std(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """The (mean, std) that ``normalize`` z-scores ``key`` with (for "meanstd" keys)."""
        scale, offset = (b.detach().cpu().numpy().astype(np.float64) for b in self._buffers_of(key))
        return -offset / scale, 1.0 / scale

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        """Map raw values (..., dim) into the normalised space."""
        scale, offset = self._buffers_of(key)
        return x * scale + offset

    def unnormalize(self, key: str, y: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`."""
        scale, offset = self._buffers_of(key)
        return (y - offset) / scale
