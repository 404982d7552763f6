"""Running mean and standard deviation of the observations (stable-baselines3's RunningMeanStd).

Batches are merged with Chan et al.'s parallel update, so every vector-env step updates the statistics
at once. The standard deviation has a floor (``sqrt(var + eps)``, 0.01 for the default ``eps``): a feature
that never moves in training (a fixed goal) would otherwise be scaled by 1e4 and turn any other value into
an outlier. The statistics end up in the exported policy's "meanstd" normaliser
(:class:`robot_rl.policies.normalizer.Normalizer`), which computes the same ``(x - mean) / std``.
"""

from __future__ import annotations

import numpy as np
import torch


class RunningNorm:
    """``normalize(x) = clip((x - mean) / sqrt(var + eps), -clip, clip)`` with statistics of every batch seen."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-4) -> None:
        self.mean = np.zeros(dim, dtype=np.float64)
        self.var = np.ones(dim, dtype=np.float64)
        self.count = 0.0
        self.clip, self.eps = float(clip), float(eps)
        self._torch: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, batch: np.ndarray) -> None:
        """Merge the mean and variance of a (B, dim) batch into the running statistics."""
        x = np.asarray(batch, dtype=np.float64).reshape(-1, self.mean.shape[0])
        n = float(x.shape[0])
        if n == 0:
            return
        b_mean, b_var = x.mean(axis=0), x.var(axis=0)
        total = self.count + n
        delta = b_mean - self.mean
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / total) / total
        self.count = total
        self._torch = None

    @property
    def std(self) -> np.ndarray:
        """The divisor of :meth:`normalize` (floored standard deviation)."""
        return np.sqrt(self.var + self.eps)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """Normalise a numpy batch (float32)."""
        return np.clip((x - self.mean) / self.std, -self.clip, self.clip).astype(np.float32)

    def normalize_torch(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise a torch batch on its device (replayed raw observations, normalised when sampled)."""
        if self._torch is None or self._torch[0].device != x.device:
            self._torch = (torch.as_tensor(self.mean, dtype=torch.float32, device=x.device),
                           torch.as_tensor(self.std, dtype=torch.float32, device=x.device))
        mean, std = self._torch
        return ((x - mean) / std).clamp(-self.clip, self.clip)
