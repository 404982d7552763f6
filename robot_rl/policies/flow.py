"""Flow-matching policy: rectified flow from Gaussian noise (t = 0) to the action chunk (t = 1).

x_t = (1 - t) * noise + t * action, target velocity v = action - noise; Euler integration with any
number of steps at inference (the same network serves 1..N steps). With ``prediction: sample`` the
network outputs the clean chunk x (loss on x, as sample-predicting diffusion) and the velocity is
derived, v = (x - x_t) / (1 - t), so the last Euler step lands exactly on the predicted chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from robot_rl.policies.base import Policy, PolicyConfig
from robot_rl.policies.losses import chunk_mse


@dataclass
class FlowConfig(PolicyConfig):
    """Flow-matching policy settings."""

    num_inference_steps: int = 10
    """Euler steps at inference."""
    time_sampling: Literal["uniform", "logit_normal"] = "uniform"
    """Distribution of t during training."""
    prediction: Literal["velocity", "sample"] = "velocity"
    """What the network outputs: the velocity (rectified flow) or the clean chunk ("sample", x-prediction;
    the velocity is derived from it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_inference_steps < 1:
            raise ValueError(f"num_inference_steps: must be >= 1, got {self.num_inference_steps}")


def sample_time(b: int, kind: str, mean: float = 0.0, std: float = 1.0,
                device: torch.device | None = None) -> torch.Tensor:
    """Flow times in [0, 1]: uniform, or logit-normal (sigmoid of N(mean, std)), on ``device``."""
    if kind == "uniform":
        return torch.rand(b, device=device)
    return torch.sigmoid(torch.randn(b, device=device) * std + mean)


class FlowPolicy(Policy):
    """Rectified-flow U-Net predicting the velocity from noise to action chunk."""

    name: ClassVar[str] = "flow"
    config_cls: ClassVar[type[PolicyConfig]] = FlowConfig
    config: FlowConfig

    def _loss(self, actions: torch.Tensor, cond: torch.Tensor,
              valid: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        noise = torch.randn_like(actions)
        t = sample_time(actions.shape[0], self.config.time_sampling, device=actions.device)
        x_t = (1 - t[:, None, None]) * noise + t[:, None, None] * actions
        out = self.net(x_t, t[:, None], cond)[0]
        loss = chunk_mse(out, actions if self.config.prediction == "sample" else actions - noise, valid)
        return loss, {"loss": loss.item()}

    def _velocity(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Velocity at (x, t) with t of shape (B, 1), t < 1; derived from the predicted chunk for "sample"."""
        out = self.net(x, t, cond)[0]
        return out if self.config.prediction == "velocity" else (out - x) / (1 - t)[:, :, None]

    def _sample(self, noise: torch.Tensor, cond: torch.Tensor, num_steps: int | None) -> torch.Tensor:
        steps = self.config.num_inference_steps if num_steps is None else int(num_steps)
        if steps < 1:
            raise ValueError(f"num_steps: must be >= 1, got {steps}")
        x, dt = noise, 1.0 / steps
        for i in range(steps):
            t = torch.full((noise.shape[0], 1), i * dt, device=noise.device)
            x = x + dt * self._velocity(x, t, cond)
        return x
