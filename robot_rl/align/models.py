"""The small networks of the learnt alignment models and their regression fit.

Both learnt corrections are MLPs from (state features, action) to a correction: the delta-action model's
output is bounded (tanh times the largest correction, as ASAP clips its delta), the delta-dynamics model's
is a free residual in units of the recorded state. Input and output statistics travel inside the weights,
so a saved model needs nothing else to run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from robot_rl.align.config import ModelSettings
from robot_rl.core.device import resolve_device
from robot_rl.policies.mlp import build_mlp


class FitDiverged(RuntimeError):
    """A fit's loss became non-finite or ended above where it started; nothing was saved."""


SQUASHES = ("linear", "tanh", "clip")
OBS_CLIP = 10.0
"""Z-scored inputs are clipped to this (as robot_rl.rl's policies)."""


class CorrectionMLP(nn.Module):
    """(features, action) -> correction: z-scored inputs, an MLP, a squash, a scale.

    The squash is none, tanh, or a clip to [-1, 1] (PPO's Gaussian mean); then ``* out_scale + out_offset``.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: tuple[int, ...], squash: str = "linear",
                 activation: str = "elu") -> None:
        super().__init__()
        if squash not in SQUASHES:
            raise ValueError(f"squash: expected one of {SQUASHES}, got {squash!r}")
        self.in_dim, self.out_dim, self.hidden, self.squash = in_dim, out_dim, tuple(hidden), squash
        self.activation = activation
        self.mlp = build_mlp(in_dim, out_dim, self.hidden, activation, False)
        self.register_buffer("in_mean", torch.zeros(in_dim))
        self.register_buffer("in_std", torch.ones(in_dim))
        self.register_buffer("out_scale", torch.ones(out_dim))
        self.register_buffer("out_offset", torch.zeros(out_dim))

    in_mean: torch.Tensor
    in_std: torch.Tensor
    out_scale: torch.Tensor
    out_offset: torch.Tensor

    def set_buffers(self, **values: np.ndarray) -> None:
        """Write the named statistics (``in_mean``, ``in_std``, ``out_scale``, ``out_offset``) from numpy."""
        for name, value in values.items():
            getattr(self, name).copy_(torch.as_tensor(np.asarray(value), dtype=torch.float32))

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """The network's output before scaling (what the regression fits)."""
        out = self.mlp(((x - self.in_mean) / self.in_std).clamp(-OBS_CLIP, OBS_CLIP))
        if self.squash == "tanh":
            return torch.tanh(out)
        return out.clamp(-1.0, 1.0) if self.squash == "clip" else out

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.raw(x) * self.out_scale + self.out_offset

    @torch.no_grad()
    def predict(self, features: np.ndarray, *actions: np.ndarray) -> np.ndarray:
        """Corrections (N, out_dim) for numpy inputs: features (N, F), then action arrays (N, A) each."""
        x = torch.as_tensor(np.concatenate([features, *actions], axis=1), dtype=torch.float32,
                            device=self.in_mean.device)
        return self(x).cpu().numpy().astype(np.float64)


@dataclass
class FitReport:
    """How a regression went."""

    first_loss: float
    """Validation loss before training."""
    final_loss: float
    """Validation loss at the end."""
    seconds: float
    """Wall time."""


def fit_regression(model: CorrectionMLP, x: np.ndarray, y_raw: np.ndarray, settings: ModelSettings, seed: int,
                   device: str = "auto", progress: bool = False, desc: str = "fit") -> FitReport:
    """Fit ``model.raw`` to ``y_raw`` (already divided by the output scale) by MSE; 10 % held for validation.

    Sets the input statistics from ``x``. Raises FitDiverged when the loss turns non-finite or the
    validation loss ends above its start (the model is left as it was before the fit then).
    """
    import time

    t0 = time.perf_counter()
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y_raw))):
        raise FitDiverged(f"{desc}: training inputs or targets contain NaN/inf")
    dev = resolve_device(device)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model.to(dev)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_buffers(in_mean=x.mean(0), in_std=x.std(0) + 1e-6)
    xt = torch.as_tensor(x, dtype=torch.float32, device=dev)
    yt = torch.as_tensor(y_raw, dtype=torch.float32, device=dev)
    perm = torch.randperm(len(xt), generator=gen).to(dev)
    n_val = max(1, len(xt) // 10)
    val, train = perm[:n_val], perm[n_val:]
    opt = torch.optim.AdamW(model.mlp.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, settings.epochs)

    def val_loss() -> float:
        with torch.no_grad():
            return float(torch.mean((model.raw(xt[val]) - yt[val]) ** 2))

    first = val_loss()
    bar = tqdm(range(settings.epochs), desc=desc, unit="epoch", disable=not progress, leave=False)
    for _ in bar:
        order = train[torch.randperm(len(train), generator=gen).to(dev)]
        for lo in range(0, len(order), settings.batch_size):
            b = order[lo:lo + settings.batch_size]
            loss = torch.mean((model.raw(xt[b]) - yt[b]) ** 2)
            if not torch.isfinite(loss):
                model.load_state_dict(before)
                raise FitDiverged(f"{desc}: the training loss became {loss.item()}; the fit diverged and was stopped "
                                  f"(lower the learning rate)")
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
    final = val_loss()
    if not np.isfinite(final) or final > first:
        model.load_state_dict(before)
        raise FitDiverged(f"{desc}: the validation loss went from {first:.4g} to {final:.4g}; the fit diverged "
                          f"and was stopped")
    model.eval()
    return FitReport(first, final, time.perf_counter() - t0)
