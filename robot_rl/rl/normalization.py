"""Running mean and standard deviation of the observations (stable-baselines3's RunningMeanStd).

The statistics are :class:`robot_rl.data.stats.RunningMeanVar` (Chan et al.'s parallel update, shared with
the dataset statistics), so every vector-env step updates them at once. The standard deviation has a floor
(``sqrt(var + eps)``, 0.01 for the default ``eps``): a feature that never moves in training (a fixed goal)
would otherwise be scaled by 1e4 and turn any other value into an outlier. The statistics end up in the
exported policy's "meanstd" normaliser (:class:`robot_rl.policies.normalizer.Normalizer`), which computes
the same ``(x - mean) / std``.
"""

from __future__ import annotations

import numpy as np
import torch

from robot_rl.data.stats import RunningMeanVar


class RunningNorm(RunningMeanVar):
    """``normalize(x) = clip((x - mean) / sqrt(var + eps), -clip, clip)`` with statistics of every batch seen."""

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-4) -> None:
        super().__init__(dim)
        self.clip, self.eps = float(clip), float(eps)
        self._torch: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, batch: np.ndarray) -> None:
        """Merge the mean and variance of a (B, dim) batch into the running statistics."""
        super().update(batch)
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
