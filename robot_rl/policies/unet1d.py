"""A small 1D temporal U-Net over action chunks, conditioned by FiLM on time(s) and observation features.

Shared by the diffusion, flow-matching, MeanFlow and VLA policies: they differ in what the time inputs
mean (diffusion step, flow time, or (t, s - t) for MeanFlow), not in the network. ``forward`` also
returns the bottleneck features, which MeanFlow's dispersive loss spreads apart.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn


class SinusoidalEmbedding(nn.Module):
    """Sin/cos features of a scalar in [0, 1] (frequencies 1 .. ``max_freq`` rad per unit).

    MeanFlow differentiates the network with respect to time (JVP), so its targets scale with the
    highest frequency; it uses a lower ``max_freq`` than diffusion.
    """

    def __init__(self, dim: int, max_freq: float = 1000.0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"time embedding dim must be even, got {dim}")
        half = dim // 2
        self.register_buffer("freqs", torch.exp(torch.linspace(0.0, math.log(max_freq), half)), persistent=False)

    freqs: torch.Tensor

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """(...,) -> (..., dim)."""
        arg = t[..., None] * self.freqs
        return torch.cat([arg.sin(), arg.cos()], dim=-1)


class _ConvBlock(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int, groups: int) -> None:
        super().__init__(nn.Conv1d(cin, cout, kernel, padding=kernel // 2), nn.GroupNorm(groups, cout), nn.Mish())


class _ResBlock(nn.Module):
    """Two conv blocks with FiLM (per-channel scale and bias from the conditioning) between them."""

    def __init__(self, cin: int, cout: int, cond_dim: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.block1 = _ConvBlock(cin, cout, kernel, groups)
        self.block2 = _ConvBlock(cout, cout, kernel, groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * cout))
        self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """(B, cin, H) -> (B, cout, H)."""
        h = self.block1(x)
        scale, bias = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        h = h * (1 + scale) + bias
        return self.block2(h) + self.skip(x)


class _Level(nn.Module):
    """Two residual blocks and a resampling layer (down- or up-sampling, or none)."""

    def __init__(self, cin: int, cout: int, cond_dim: int, kernel: int, groups: int, resample: nn.Module) -> None:
        super().__init__()
        self.res1 = _ResBlock(cin, cout, cond_dim, kernel, groups)
        self.res2 = _ResBlock(cout, cout, cond_dim, kernel, groups)
        self.resample = resample

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(resampled output, features before resampling)."""
        h = self.res2(self.res1(x, cond), cond)
        return self.resample(h), h


class ConditionalUnet1D(nn.Module):
    """Maps a noisy chunk (B, H, A), time inputs (B, n_times) and conditioning (B, C) to (B, H, A)."""

    def __init__(self, action_dim: int, cond_dim: int, n_times: int = 1, channels: tuple[int, ...] = (64, 128),
                 kernel: int = 5, time_dim: int = 64, groups: int = 8, time_max_freq: float = 1000.0) -> None:
        super().__init__()
        self.time_embed = nn.ModuleList([SinusoidalEmbedding(time_dim, time_max_freq) for _ in range(n_times)])
        film = time_dim * n_times + cond_dim
        self.cond_mlp = nn.Sequential(nn.Linear(film, 2 * film), nn.Mish(), nn.Linear(2 * film, film))
        dims = (action_dim, *channels)
        self.down = nn.ModuleList([
            _Level(cin, cout, film, kernel, groups,
                   nn.Identity() if i == len(channels) - 1 else nn.Conv1d(cout, cout, 3, stride=2, padding=1))
            for i, (cin, cout) in enumerate(itertools.pairwise(dims))])
        self.mid = nn.ModuleList([_ResBlock(channels[-1], channels[-1], film, kernel, groups) for _ in range(2)])
        self.up = nn.ModuleList([
            _Level(2 * cin, cout, film, kernel, groups, nn.ConvTranspose1d(cout, cout, 4, stride=2, padding=1))
            for cout, cin in reversed(list(itertools.pairwise(channels)))])
        self.final = nn.Sequential(_ConvBlock(channels[0], channels[0], kernel, groups),
                                   nn.Conv1d(channels[0], action_dim, 1))
        self.downsampling = 2 ** (len(channels) - 1)

    def forward(self, x: torch.Tensor, times: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output (B, H, A), flattened bottleneck features (B, D) for the dispersive loss)."""
        if x.shape[1] % self.downsampling:
            raise ValueError(f"horizon {x.shape[1]} must be a multiple of {self.downsampling} for this U-Net")
        t_emb = [emb(times[:, i]) for i, emb in enumerate(self.time_embed)]
        c = self.cond_mlp(torch.cat([*t_emb, cond], dim=-1))
        h = x.transpose(1, 2)
        skips = []
        for level in self.down:
            h, skip = level(h, c)
            skips.append(skip)
        for block in self.mid:
            h = block(h, c)
        hidden = h.flatten(1)
        for level, skip in zip(self.up, reversed(skips)):
            h, _ = level(torch.cat([h, skip], dim=1), c)
        return self.final(h).transpose(1, 2), hidden
