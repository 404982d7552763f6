"""Regression loss over action chunks that leaves out the steps no one recorded.

A window near the end of a recorded segment asks for actions past it. At a real episode end the robot
holds still, so repeating the last action is the right label (diffusion_policy's sequence sampler). A
human intervention, though, ends by handing control back mid-motion: what follows is the policy's, not a
label, and a repeated last action would teach "stop here". Such steps come marked in ``action_is_pad``
and are left out of the loss, as LeRobot's ACT masks padded actions.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def chunk_mse(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error of (B, H, A) chunks over the steps ``valid`` (B, H) marks; all when None."""
    if valid is None:
        return F.mse_loss(pred, target)
    weight = valid.to(pred.dtype)[..., None].expand_as(pred)
    return ((pred - target).pow(2) * weight).sum() / weight.sum().clamp_min(1.0)


def step_weights(valid: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | float:
    """``valid`` (B, H) as float weights broadcastable to ``like`` (B, H, A); 1.0 when None."""
    return 1.0 if valid is None else valid.to(like.dtype)[..., None]
