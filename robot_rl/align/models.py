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
from tqdm import tqdm

from robot_rl.align.config import ModelSettings
from robot_rl.core.device import resolve_device
from robot_rl.sim.alignment import OBS_CLIP, SQUASHES, CorrectionMLP

__all__ = ["OBS_CLIP", "SQUASHES", "CorrectionMLP", "FitDiverged", "FitReport", "fit_regression"]


class FitDiverged(RuntimeError):
    """A fit's loss became non-finite or ended above where it started; nothing was saved."""


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
