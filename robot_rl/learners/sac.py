"""The one SAC: tanh-Gaussian actor, LayerNorm critic ensemble with Polyak targets, entropy temperature.

Every SAC of the project is this one: the RLPD / residual learner (:mod:`robot_rl.learners.sac_rlpd`),
DSRL's SAC in the latent-noise space of a frozen generative policy (:mod:`robot_rl.learners.dsrl`) and
``robot-rl rl train``'s SAC from scratch (:mod:`robot_rl.rl.sac`, through the RLPD learner). Their
hyperparameters are :class:`SACConfig` (each adds its own fields in a subclass). :class:`SAC` owns the
networks, the temperature, their optimisers and the sampler of target critics, and does the three steps
of an update; a subclass says what the actor and the critics see:

* :meth:`SAC.next_value`: the soft value of the next state, the min over a random subset of target
  critics (REDQ; ``num_target_critics: 2`` of 2 is clipped double Q), minus ``alpha * log pi`` when
  ``backup_entropy``;
* :meth:`SAC.critic_step`: one TD step of the critics towards a target, then the Polyak update;
* :meth:`SAC.actor_step`: one actor step (maximise Q - alpha * log pi, plus a subclass's regulariser),
  then one temperature step towards ``target_entropy``.

Checkpoints: :meth:`SAC.state_tensors` / :meth:`SAC.load_state_tensors` (safetensors-ready tensors and
the optimisers' param groups; the subclass writes the files).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robot_rl.core.device import check_device_name, resolve_device
from robot_rl.core.spaces import SpecError


@dataclass
class SACConfig:
    """SAC's hyperparameters (RLPD, residual, DSRL and ``rl train`` extend them in a subclass)."""

    hidden: int = 256
    """Width of the two hidden layers of actor and critics."""
    num_critics: int = 10
    """Critic ensemble size (RLPD uses 10; 2 is SAC's clipped double Q)."""
    num_target_critics: int = 2
    """Random subset of target critics whose minimum forms the TD target (REDQ)."""
    gamma: float = 0.97
    """Discount."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    lr: float = 3e-4
    """Adam learning rate of actor, critics and temperature."""
    init_temperature: float = 0.01
    """Initial entropy temperature (HIL-SERL uses 1e-2: a large one drowns human interventions)."""
    target_entropy: float | None = None
    """Target entropy; None: -(action dimensions) / 2."""
    grad_clip: float = 10.0
    """Gradient-norm clip for actor and critics."""
    backup_entropy: bool = True
    """Add the entropy bonus -alpha * log pi to the TD target (soft Q, as SAC). False bounds Q by the task's
    return (as RLPD's and DSRL's fine-tuning set-ups allow): with sparse rewards the bonus of a wide action
    space can outweigh the success signal."""
    device: str = "auto"
    """Where the networks train and act: "auto" (CUDA when available, else CPU), "cpu" or "cuda"."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        if self.hidden < 1:
            raise ValueError(f"hidden: must be >= 1, got {self.hidden}")
        if not 1 <= self.num_target_critics <= self.num_critics:
            raise ValueError(f"num_target_critics: must be in [1, num_critics={self.num_critics}], "
                             f"got {self.num_target_critics}")
        if not 0.0 < self.gamma < 1.0 or not 0.0 < self.tau <= 1.0:
            raise ValueError(f"gamma must be in (0, 1) and tau in (0, 1], got {self.gamma}, {self.tau}")
        if not (self.lr > 0 and self.init_temperature > 0 and self.grad_clip > 0):
            raise ValueError("lr, init_temperature and grad_clip must be > 0")


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied in one batched matmul: (E, B, in) -> (E, B, out)."""

    def __init__(self, ensemble: int, fan_in: int, fan_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = nn.Parameter(torch.empty(ensemble, fan_in, fan_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, fan_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply every member to its own slice of ``x``."""
        return torch.baddbmm(self.bias, x, self.weight)


class CriticEnsemble(nn.Module):
    """``E`` Q-functions Q(s, a) with LayerNorm after each hidden layer (RLPD's stabiliser)."""

    def __init__(self, ensemble: int, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.ensemble = ensemble
        self.l1 = EnsembleLinear(ensemble, obs_dim + action_dim, hidden)
        self.l2 = EnsembleLinear(ensemble, hidden, hidden)
        self.out = EnsembleLinear(ensemble, hidden, 1)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """(E, B) Q values."""
        x = torch.cat([obs, action], -1).expand(self.ensemble, -1, -1)
        x = torch.relu(self.ln1(self.l1(x)))
        x = torch.relu(self.ln2(self.l2(x)))
        return self.out(x).squeeze(-1)


class GaussianActor(nn.Module):
    """Tanh-squashed diagonal Gaussian; optionally residual on a base action."""

    LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, residual_scale: float) -> None:
        super().__init__()
        self.residual_scale = residual_scale
        in_dim = obs_dim + (action_dim if residual_scale > 0 else 0)
        self.trunk = nn.Sequential(nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.ReLU(),
                                   nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 2 * action_dim)
        if residual_scale > 0:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward(self, obs: torch.Tensor, base: torch.Tensor | None, deterministic: bool = False,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(executed action (B, A), log-probability (B,)) of a fresh sample (or the mean).

        ``generator`` draws the noise (a CPU generator; None: torch's global one).
        """
        x = obs if self.residual_scale <= 0 else torch.cat([obs, _need(base)], -1)
        mean, log_std = self.head(self.trunk(x)).chunk(2, -1)
        log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        if self.residual_scale > 0:
            log_std = log_std - 2.0  # exploration noise of a residual starts small (ResFiT uses sigma 0.05)
        noise = (torch.randn_like(mean) if generator is None
                 else torch.randn(mean.shape, generator=generator).to(mean.device))
        u = mean if deterministic else mean + log_std.exp() * noise
        squashed = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log1p(-squashed.pow(2) + 1e-6).sum(-1)
        if self.residual_scale > 0:
            return (_need(base) + self.residual_scale * squashed).clamp(-1.0, 1.0), logp
        return squashed, logp


def _need(base: torch.Tensor | None) -> torch.Tensor:
    if base is None:
        raise SpecError("base_action: a residual actor needs the base policy's action")
    return base


def optimizer_step(opt: torch.optim.Optimizer, module: nn.Module | None, loss: torch.Tensor,
                   grad_clip: float) -> None:
    """Zero the gradients, back-propagate ``loss``, clip ``module``'s gradient norm (None: no clip), step."""
    opt.zero_grad()
    loss.backward()
    if module is not None:
        nn.utils.clip_grad_norm_(module.parameters(), grad_clip)
    opt.step()


class SAC:
    """Actor, critic ensemble and its targets, temperature, their optimisers; the steps of an update.

    A subclass seeds torch's global RNG and builds ``actor`` first (the initial weights depend on that
    order: actor, critics, targets). ``critic_obs_dim`` / ``critic_action_dim`` are what the critics see
    besides / as the action; ``entropy_dim`` the size of the actor's sample (target entropy -dim / 2).
    """

    def __init__(self, config: SACConfig, actor: nn.Module, critic_obs_dim: int, critic_action_dim: int,
                 entropy_dim: int, seed: int) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        """Where networks, temperature and batches live."""
        self.actor = actor
        self.critic = CriticEnsemble(config.num_critics, critic_obs_dim, critic_action_dim, config.hidden)
        self.target = CriticEnsemble(config.num_critics, critic_obs_dim, critic_action_dim, config.hidden)
        self.target.load_state_dict(self.critic.state_dict())
        self.target.requires_grad_(False)
        for module in (self.actor, self.critic, self.target):
            module.to(self.device)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.init_temperature), device=self.device))
        self.target_entropy = config.target_entropy if config.target_entropy is not None else -entropy_dim / 2
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.lr)
        self.rng = torch.Generator().manual_seed(seed)
        """Picks the target critics (and whatever else a subclass draws reproducibly)."""
        self.updates = 0

    @property
    def alpha(self) -> float:
        """Current entropy temperature."""
        return float(self.log_alpha.detach().exp())

    # ------------------------------------------------------------------ the steps of an update
    @torch.no_grad()
    def next_value(self, next_state: torch.Tensor, next_action: torch.Tensor, next_logp: torch.Tensor
                   ) -> torch.Tensor:
        """(B,) soft value of the next state: min over a random subset of target critics (- alpha log pi)."""
        cfg = self.config
        pick = torch.randperm(cfg.num_critics, generator=self.rng)[: cfg.num_target_critics].to(self.device)
        q_next = self.target(next_state, next_action)[pick].min(0).values
        return q_next - self.alpha * next_logp if cfg.backup_entropy else q_next

    def critic_step(self, state: torch.Tensor, action: torch.Tensor, target: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One TD step of every critic towards ``target`` (B,), then the Polyak update; (loss, Q (E, B)), detached."""
        q = self.critic(state, action)
        loss = ((q - target) ** 2).mean()
        optimizer_step(self.critic_opt, self.critic, loss, self.config.grad_clip)
        with torch.no_grad():
            for p, tp in zip(self.critic.parameters(), self.target.parameters()):
                tp.lerp_(p, self.config.tau)
        return loss.detach(), q.detach()

    def actor_step(self, logp: torch.Tensor, q_pi: torch.Tensor, regulariser: torch.Tensor | None = None
                   ) -> dict[str, float]:
        """One actor step on mean(alpha log pi - mean_E Q) (+ ``regulariser``), then one temperature step.

        ``logp`` (B,) and ``q_pi`` (E, B) are of fresh samples of the actor (with their graph).
        """
        actor_loss = (self.alpha * logp - q_pi.mean(0)).mean()
        if regulariser is not None:
            actor_loss = actor_loss + regulariser
        optimizer_step(self.actor_opt, self.actor, actor_loss, self.config.grad_clip)
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        optimizer_step(self.alpha_opt, None, alpha_loss, self.config.grad_clip)
        return {"actor_loss": float(actor_loss.detach()), "alpha": self.alpha, "entropy": float(-logp.detach().mean())}

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_names(self) -> tuple[dict[str, nn.Module], dict[str, torch.optim.Optimizer], str]:
        """(modules, optimisers, optimiser key prefix) as a checkpoint names them (a subclass may rename)."""
        return ({"actor": self.actor, "critic": self.critic, "target": self.target},
                {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}, "")

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(CPU tensors of networks, temperature, RNG and optimiser moments; the optimisers' param groups)."""
        modules, optimizers, prefix = self.checkpoint_names()
        tensors = {f"{m}.{k}": v for m, module in modules.items() for k, v in module.state_dict().items()}
        tensors["log_alpha"] = self.log_alpha.detach()
        tensors["rng_state"] = self.rng.get_state()
        groups = {}
        for name, opt in optimizers.items():
            state = opt.state_dict()
            groups[name] = state["param_groups"]
            for idx, slots in state["state"].items():
                for slot, value in slots.items():
                    tensors[f"{prefix}{name}.{idx}.{slot}"] = torch.as_tensor(value)
        return {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, groups

    def load_state_tensors(self, tensors: Mapping[str, torch.Tensor], groups: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_tensors` (strict: every network tensor must be there)."""
        modules, optimizers, prefix = self.checkpoint_names()
        for name, module in modules.items():
            module.load_state_dict({k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(name + ".")},
                                   strict=True)
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"])
        self.rng.set_state(tensors["rng_state"])
        for name, opt in optimizers.items():
            head = f"{prefix}{name}."
            state: dict[int, dict[str, torch.Tensor]] = {}
            for key, value in tensors.items():
                if key.startswith(head):
                    idx, slot = key[len(head):].split(".", 1)
                    state.setdefault(int(idx), {})[slot] = value
            opt.load_state_dict({"state": state, "param_groups": groups[name]})
