"""SAC in the RLPD recipe: LayerNorm critic ensemble, high update-to-data ratio, 50/50 online/demo batches.

Actions live in [-1, 1]^A (the arm envs' normalised actions). The actor is a small tanh-Gaussian MLP;
with ``residual_scale > 0`` it is residual on a frozen base policy (ResFiT: Ankile et al., "Residual
Off-Policy RL for Finetuning Behavior Cloning Policies", arXiv:2509.19301): it also sees ``base_action``
and executes ``clip(base_action + residual_scale * tanh(u), -1, 1)``; its last layer starts at zero so
the residual starts as the base policy's own action. The critics score the EXECUTED action (a residual's
critics also see the base action), so human intervention steps (routed into both buffers) teach the
critic directly. A residual actor can wait ``actor_delay`` updates for the critics (ResFiT's critic
warm-up) and pay ``residual_penalty`` for its size. Targets take the min over a
random pair of target critics (REDQ); truncated steps still bootstrap. Checkpoints are safetensors
(networks, optimiser moments) + JSON; no pickle.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.core.config import config_to_dict, load_config
from robot_rl.core.device import check_device_name, resolve_device
from robot_rl.core.spaces import SpecError


@dataclass
class SACConfig:
    """SAC / RLPD settings."""

    state_keys: list[str] = field(default_factory=list)
    """Observation keys concatenated (flattened) into the state vector, in this order (a learner needs at
    least one; empty only in a config whose owner fills them in, e.g. the residual learner of the online runner)."""
    hidden: int = 256
    """Width of the two hidden layers of actor and critics."""
    num_critics: int = 10
    """Critic ensemble size (RLPD uses 10)."""
    num_target_critics: int = 2
    """Random subset of target critics whose minimum forms the TD target (REDQ)."""
    gamma: float = 0.97
    """Discount."""
    tau: float = 0.005
    """Polyak rate of the target critics."""
    lr: float = 3e-4
    """Adam learning rate of actor, critics and temperature."""
    batch_size: int = 256
    """Transitions per update."""
    utd_ratio: int = 8
    """Critic updates per call of :meth:`SACLearner.update` (the actor is updated once per call)."""
    demo_fraction: float = 0.5
    """Share of each batch drawn from the demo/intervention buffer (RLPD symmetric sampling)."""
    init_temperature: float = 0.01
    """Initial entropy temperature (HIL-SERL uses 1e-2: a large one drowns human interventions)."""
    target_entropy: float | None = None
    """Target entropy; None: -action_dim / 2."""
    residual_scale: float = 0.0
    """0: a plain actor. > 0: residual on ``base_action`` with this largest correction per dimension."""
    grad_clip: float = 10.0
    """Gradient-norm clip for actor and critics."""
    actor_delay: int = 0
    """Updates that train only the critics (ResFiT's critic warm-up): a random critic would push the actor
    (a residual: to its bound) before it has learnt what the base policy's actions are worth."""
    residual_penalty: float = 0.0
    """Weight of mean(tanh(u)^2) in a residual actor's loss: the correction stays near zero unless the
    critics agree it pays (0: plain SAC)."""
    backup_entropy: bool = True
    """Add the entropy bonus -alpha * log pi to the TD target (soft Q, as SAC). False bounds Q by the task's
    return (as RLPD's and DSRL's fine-tuning set-ups allow): with sparse rewards the bonus of a wide action
    space can outweigh the success signal."""
    device: str = "auto"
    """Where the networks train and act: "auto" (CUDA when available, else CPU), "cpu" or "cuda"."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        if self.hidden < 1 or self.batch_size < 1 or self.utd_ratio < 1:
            raise ValueError("hidden, batch_size and utd_ratio must be >= 1")
        if not 1 <= self.num_target_critics <= self.num_critics:
            raise ValueError(f"num_target_critics: must be in [1, num_critics={self.num_critics}], "
                             f"got {self.num_target_critics}")
        if not 0.0 < self.gamma < 1.0 or not 0.0 < self.tau <= 1.0:
            raise ValueError(f"gamma must be in (0, 1) and tau in (0, 1], got {self.gamma}, {self.tau}")
        if not 0.0 <= self.demo_fraction <= 1.0:
            raise ValueError(f"demo_fraction: must be in [0, 1], got {self.demo_fraction}")
        if self.lr <= 0 or self.init_temperature <= 0 or self.residual_scale < 0 or self.grad_clip <= 0:
            raise ValueError("lr, init_temperature and grad_clip must be > 0, residual_scale >= 0")
        if self.actor_delay < 0 or self.residual_penalty < 0:
            raise ValueError("actor_delay and residual_penalty must be >= 0")


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


def state_array(obs: dict[str, Any], state_dims: dict[str, int]) -> np.ndarray:
    """The keys of ``state_dims`` concatenated into (B, D) float32 (one observation gives B = 1), checked."""
    parts = []
    for key, dim in state_dims.items():
        if key not in obs:
            raise SpecError(f"observation.{key}: missing")
        arr = np.asarray(obs[key], dtype=np.float32)
        arr = arr.reshape(-1, dim) if arr.size % dim == 0 else arr
        if arr.ndim != 2 or arr.shape[1] != dim:
            raise SpecError(f"observation.{key}: expected {dim} values per row, got shape {np.shape(obs[key])}")
        if not np.all(np.isfinite(arr)):
            raise SpecError(f"observation.{key}: contains NaN or inf")
        parts.append(arr)
    return np.concatenate(parts, -1)


def _need(base: torch.Tensor | None) -> torch.Tensor:
    if base is None:
        raise SpecError("base_action: a residual actor needs the base policy's action")
    return base


class SACLearner:
    """Actor, critic ensemble, temperature and their optimisers; :meth:`update` on RLPD batches."""

    def __init__(self, config: SACConfig, state_dims: dict[str, int], action_dim: int, seed: int = 0) -> None:
        if not config.state_keys:
            raise SpecError("state_keys: name at least one observation key")
        missing = [k for k in config.state_keys if k not in state_dims]
        if missing:
            raise SpecError(f"observation: state key(s) {missing} not among {sorted(state_dims)}")
        torch.manual_seed(seed)
        self.config, self.action_dim = config, int(action_dim)
        self.state_dims = {k: int(state_dims[k]) for k in config.state_keys}
        obs_dim = sum(self.state_dims.values())
        self.actor = GaussianActor(obs_dim, action_dim, config.hidden, config.residual_scale)
        critic_in = obs_dim + (action_dim if config.residual_scale > 0 else 0)  # a residual's critics see the base
        self.critic = CriticEnsemble(config.num_critics, critic_in, action_dim, config.hidden)
        self.target = CriticEnsemble(config.num_critics, critic_in, action_dim, config.hidden)
        self.target.load_state_dict(self.critic.state_dict())
        self.target.requires_grad_(False)
        self.device = resolve_device(config.device)
        """Where networks, temperature and batches live."""
        for module in (self.actor, self.critic, self.target):
            module.to(self.device)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.init_temperature), device=self.device))
        self.target_entropy = (config.target_entropy if config.target_entropy is not None else -action_dim / 2)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.lr)
        self.rng = torch.Generator().manual_seed(seed)
        self.updates = 0

    # ------------------------------------------------------------------ acting
    def state_vector(self, obs: dict[str, Any]) -> torch.Tensor:
        """Concatenate the configured keys into (B, D) float32 (a single observation gives B = 1)."""
        return torch.from_numpy(state_array(obs, self.state_dims)).to(self.device, non_blocking=True)

    @torch.no_grad()
    def act(self, obs: dict[str, Any], base_action: np.ndarray | None = None, deterministic: bool = False
            ) -> np.ndarray:
        """Action(s) in [-1, 1]: (A,) for one observation, (B, A) for a batch."""
        state = self.state_vector(obs)
        base = None if base_action is None else torch.as_tensor(
            np.asarray(base_action, np.float32), device=self.device).reshape(state.shape[0], self.action_dim)
        action, _ = self.actor(state, base, deterministic)
        out = action.cpu().numpy()
        return out[0] if np.asarray(next(iter(obs.values()))).ndim == 1 else out

    # ------------------------------------------------------------------ learning
    @property
    def alpha(self) -> float:
        """Current entropy temperature."""
        return float(self.log_alpha.detach().exp())

    def _tensors(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        obs = {k[4:]: v for k, v in batch.items() if k.startswith("obs.")}
        nxt = {k[9:]: v for k, v in batch.items() if k.startswith("next_obs.")}
        out = {"obs": self.state_vector(obs), "next_obs": self.state_vector(nxt),
               "action": torch.as_tensor(batch["action"], dtype=torch.float32, device=self.device),
               "reward": torch.as_tensor(batch["reward"], dtype=torch.float32, device=self.device),
               "done": torch.as_tensor(batch["terminated"], dtype=torch.float32, device=self.device)}
        base = batch.get("base_action")
        out["base"] = (torch.as_tensor(base, dtype=torch.float32, device=self.device) if base is not None
                       else out["action"])
        next_base = batch.get("next_base_action")
        out["next_base"] = (torch.as_tensor(next_base, dtype=torch.float32, device=self.device)
                            if next_base is not None else out["base"])
        return out

    def _critic_state(self, b: dict[str, torch.Tensor], prefix: str = "") -> torch.Tensor:
        """What the critics see besides the action: the state, and a residual's base action (ResFiT)."""
        state = b[prefix + "obs"]
        return torch.cat([state, b[prefix + "base"]], -1) if self.config.residual_scale > 0 else state

    def update(self, batches: Sequence[dict[str, np.ndarray]]) -> dict[str, float]:
        """``len(batches)`` critic updates (the UTD ratio), then one actor and temperature update.

        The actor waits for ``actor_delay`` updates. Each batch is a dict of columns as
        :func:`robot_rl.learners.buffers.mixed_sample` returns.
        """
        if not batches:
            raise ValueError("update: need at least one batch")
        cfg = self.config
        metrics: dict[str, float] = {}
        for raw in batches:
            b = self._tensors(raw)
            with torch.no_grad():
                next_action, next_logp = self.actor(b["next_obs"], b["next_base"])
                pick = torch.randperm(cfg.num_critics, generator=self.rng)[: cfg.num_target_critics].to(self.device)
                q_next = self.target(self._critic_state(b, "next_"), next_action)[pick].min(0).values
                soft = q_next - self.alpha * next_logp if cfg.backup_entropy else q_next
                target = b["reward"] + cfg.gamma * (1.0 - b["done"]) * soft
            q = self.critic(self._critic_state(b), b["action"])
            critic_loss = ((q - target) ** 2).mean()
            self.critic_opt.zero_grad()
            critic_loss.backward()
            nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
            self.critic_opt.step()
            with torch.no_grad():
                for p, tp in zip(self.critic.parameters(), self.target.parameters()):
                    tp.lerp_(p, cfg.tau)
            metrics["critic_loss"] = float(critic_loss.detach())
            metrics["q_mean"] = float(q.detach().mean())
        self.updates += 1
        if self.updates > cfg.actor_delay:
            metrics.update(self._update_actor(b))
        return metrics

    def _update_actor(self, b: dict[str, torch.Tensor]) -> dict[str, float]:
        """One actor and temperature step on batch ``b`` (the last critic batch)."""
        cfg = self.config
        action, logp = self.actor(b["obs"], b["base"])
        actor_loss = (self.alpha * logp - self.critic(self._critic_state(b), action).mean(0)).mean()
        if cfg.residual_scale > 0 and cfg.residual_penalty > 0:
            correction = (action - b["base"]) / cfg.residual_scale
            actor_loss = actor_loss + cfg.residual_penalty * correction.pow(2).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip)
        self.actor_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        alpha_loss.backward()
        self.alpha_opt.step()
        return {"actor_loss": float(actor_loss.detach()), "alpha": self.alpha, "entropy": float(-logp.detach().mean())}

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: str | Path) -> Path:
        """Networks, optimiser moments and config into ``folder`` (written to a temp folder, then renamed)."""
        folder = Path(folder)
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tensors = {f"actor.{k}": v for k, v in self.actor.state_dict().items()}
        tensors |= {f"critic.{k}": v for k, v in self.critic.state_dict().items()}
        tensors |= {f"target.{k}": v for k, v in self.target.state_dict().items()}
        tensors["log_alpha"] = self.log_alpha.detach()
        tensors["rng_state"] = self.rng.get_state()
        groups = {}
        for name, opt in (("actor_opt", self.actor_opt), ("critic_opt", self.critic_opt),
                          ("alpha_opt", self.alpha_opt)):
            state = opt.state_dict()
            groups[name] = state["param_groups"]
            for idx, slots in state["state"].items():
                for slot, value in slots.items():
                    tensors[f"{name}.{idx}.{slot}"] = torch.as_tensor(value)
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()},
                  str(tmp / "learner.safetensors"))
        meta = {"format": "robot_rl.sac_rlpd", "config": config_to_dict(self.config), "state_dims": self.state_dims,
                "action_dim": self.action_dim, "updates": self.updates, "param_groups": groups}
        (tmp / "learner.json").write_text(json.dumps(meta), encoding="utf-8")
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
            os.replace(tmp, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, folder)
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: str | None = None) -> SACLearner:
        """Rebuild a learner from :meth:`save` output (continues exactly: same weights and optimiser moments).

        ``device`` overrides the saved config's.
        """
        folder = Path(folder)
        meta = json.loads((folder / "learner.json").read_text(encoding="utf-8"))
        if meta.get("format") != "robot_rl.sac_rlpd":
            raise SpecError(f"{folder}: not a SAC learner checkpoint")
        config = load_config(SACConfig, meta["config"] if device is None else {**meta["config"], "device": device})
        learner = cls(config, meta["state_dims"], meta["action_dim"])
        tensors = load_file(str(folder / "learner.safetensors"))
        for prefix, module in (("actor", learner.actor), ("critic", learner.critic), ("target", learner.target)):
            module.load_state_dict({k[len(prefix) + 1:]: v for k, v in tensors.items()
                                    if k.startswith(prefix + ".")}, strict=True)
        with torch.no_grad():
            learner.log_alpha.copy_(tensors["log_alpha"])
        learner.rng.set_state(tensors["rng_state"])
        for name in ("actor_opt", "critic_opt", "alpha_opt"):
            opt = getattr(learner, name)
            state: dict[int, dict[str, torch.Tensor]] = {}
            for key, value in tensors.items():
                if key.startswith(name + "."):
                    _, idx, slot = key.split(".", 2)
                    state.setdefault(int(idx), {})[slot] = value
            opt.load_state_dict({"state": state, "param_groups": meta["param_groups"][name]})
        learner.updates = int(meta["updates"])
        return learner
