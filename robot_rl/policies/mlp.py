"""A small MLP policy: one action per observation, the deterministic mean of a Gaussian actor.

This is what reinforcement learning from scratch (:mod:`robot_rl.rl`) exports, so a trained actor runs
through the same :class:`~robot_rl.policies.base.Policy` interface as the imitation policies:
``robot-rl eval``, the :class:`~robot_rl.runtime.PolicyRunner` and the ROS policy node load it unchanged.
A chunk is one action (``horizon = 1``, one observation step, executed at once), computed as

    a = unnormalize(squash(mlp(clip(normalize(obs), -obs_clip, obs_clip)))[:action_dim])

where ``normalize`` is the base class's per-key "meanstd" normaliser holding the running mean and
standard deviation of the observations seen in training (so they travel inside ``model.safetensors``),
the state keys are concatenated in the order of ``spec.state_dims`` (the order the trainer flattened
them in), ``squash`` is a clip to [-1, 1] (PPO's unbounded Gaussian mean, as rsl_rl's and
stable-baselines3's PPO clip actions) or ``tanh`` (SAC's squashed Gaussian), and the action
normaliser maps [-1, 1] onto the action space's bounds. Networks with a second output block (SAC's
log-standard deviation, ``head_outputs: 2``) keep it so their weights load as trained; inference reads
only the mean. The starting noise that ``predict_chunk`` draws is ignored: the policy is deterministic.

The base class builds a U-Net from ``unet_channels``; this policy drops it for the MLP (the smallest valid
U-Net settings are the defaults, and nothing of it is kept in the checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.policies.base import Policy, PolicyConfig, PolicySpec
from robot_rl.policies.chunking import ExecutorConfig

ACTIVATIONS: dict[str, type[nn.Module]] = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def _one_step_executor() -> ExecutorConfig:
    return ExecutorConfig(mode="latest", n_action_steps=1, blend_steps=0)


@dataclass
class MLPConfig(PolicyConfig):
    """MLP policy settings (the base's U-Net fields are unused and kept at their smallest valid values)."""

    n_obs_steps: int = 1
    """Observation steps the MLP sees (1: the current observation)."""
    horizon: int = 1
    """Actions per chunk (1: a new action at every step)."""
    executor: ExecutorConfig = field(default_factory=_one_step_executor)
    """Each one-action chunk is executed at once."""
    unet_channels: tuple[int, ...] = (8,)
    """Unused (the base class's U-Net, replaced by the MLP)."""
    state_norm: Literal["minmax", "meanstd"] = "meanstd"
    """Observations are z-scored with the running statistics of training."""
    hidden: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers."""
    activation: Literal["elu", "relu", "tanh"] = "elu"
    """Non-linearity after each hidden layer."""
    layer_norm: bool = False
    """LayerNorm after each hidden linear layer (before the activation), as RLPD's SAC actor."""
    head_outputs: int = 1
    """Output blocks of ``action_dim`` values: 1 (the mean) or 2 (mean and log-std; the second is unused)."""
    squash: Literal["clip", "tanh"] = "clip"
    """How the mean becomes a normalised action in [-1, 1]."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to +-obs_clip (as in training)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.horizon != 1 or self.n_obs_steps != 1:
            raise ValueError(f"horizon and n_obs_steps: an MLP policy acts on one observation with one action, "
                             f"got horizon {self.horizon}, n_obs_steps {self.n_obs_steps}")
        if self.image_keys:
            raise ValueError(f"image_keys: the MLP policy takes state observations only, got {self.image_keys}")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"hidden: need at least one layer of width >= 1, got {self.hidden}")
        if self.head_outputs not in (1, 2):
            raise ValueError(f"head_outputs: must be 1 or 2, got {self.head_outputs}")
        if not self.obs_clip > 0:
            raise ValueError(f"obs_clip: must be > 0, got {self.obs_clip}")


def build_mlp(in_dim: int, out_dim: int, hidden: tuple[int, ...], activation: str, layer_norm: bool) -> nn.Sequential:
    """Linear [-> LayerNorm] -> activation per hidden layer, then a linear output layer."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers.append(nn.Linear(in_dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(ACTIVATIONS[activation]())
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class MLPPolicy(Policy):
    """Deterministic Gaussian-MLP actor behind the chunked-policy interface (see the module docstring)."""

    name: ClassVar[str] = "mlp"
    config_cls: ClassVar[type[PolicyConfig]] = MLPConfig
    config: MLPConfig

    def __init__(self, config: PolicyConfig, spec: PolicySpec) -> None:
        super().__init__(config, spec)
        cfg = self.config
        del self.net  # the base's U-Net
        self.mlp = build_mlp(self.encoder.out_dim, cfg.head_outputs * spec.action_dim, tuple(cfg.hidden),
                             cfg.activation, cfg.layer_norm)

    def mean_action(self, cond: torch.Tensor) -> torch.Tensor:
        """Normalised observations (B, D) -> normalised deterministic actions (B, A) in [-1, 1]."""
        cfg = self.config
        mean = self.mlp(cond.clamp(-cfg.obs_clip, cfg.obs_clip))[:, : self.spec.action_dim]
        return torch.tanh(mean) if cfg.squash == "tanh" else mean.clamp(-1.0, 1.0)

    def _loss(self, actions: torch.Tensor, cond: torch.Tensor,
              valid: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Behaviour cloning (so ``robot-rl train`` can also fit one): MSE of the mean to the first action.

        The first action is always a label (``valid`` only ever marks steps after a segment's end).
        """
        loss = F.mse_loss(self.mean_action(cond), actions[:, 0].clamp(-1.0, 1.0))
        return loss, {"loss": loss.item()}

    def _sample(self, noise: torch.Tensor, cond: torch.Tensor, num_steps: int | None) -> torch.Tensor:
        return self.mean_action(cond)[:, None, :]
