"""SAC in the RLPD recipe: LayerNorm critic ensemble, high update-to-data ratio, 50/50 online/demo batches.

The networks and the steps of the update are the project's one SAC (:mod:`robot_rl.learners.sac`);
this module feeds it state vectors and RLPD batches.

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
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robot_rl.core.config import config_to_dict, load_config
from robot_rl.core.spaces import SpecError
from robot_rl.learners.sac import SAC, GaussianActor, SACConfig


@dataclass
class SACLearnerConfig(SACConfig):
    """SAC's hyperparameters (:class:`robot_rl.learners.sac.SACConfig`) and RLPD's / a residual actor's."""

    state_keys: list[str] = field(default_factory=list)
    """Observation keys concatenated (flattened) into the state vector, in this order (a learner needs at
    least one; empty only in a config whose owner fills them in, e.g. the residual learner of the online runner)."""
    batch_size: int = 256
    """Transitions per update."""
    utd_ratio: int = 8
    """Critic updates per call of :meth:`SACLearner.update` (the actor is updated once per call)."""
    demo_fraction: float = 0.5
    """Share of each batch drawn from the demo/intervention buffer (RLPD symmetric sampling)."""
    residual_scale: float = 0.0
    """0: a plain actor. > 0: residual on ``base_action`` with this largest correction per dimension."""
    actor_delay: int = 0
    """Updates that train only the critics (ResFiT's critic warm-up): a random critic would push the actor
    (a residual: to its bound) before it has learnt what the base policy's actions are worth."""
    residual_penalty: float = 0.0
    """Weight of mean(tanh(u)^2) in a residual actor's loss: the correction stays near zero unless the
    critics agree it pays (0: plain SAC)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1 or self.utd_ratio < 1:
            raise ValueError("batch_size and utd_ratio must be >= 1")
        if not 0.0 <= self.demo_fraction <= 1.0:
            raise ValueError(f"demo_fraction: must be in [0, 1], got {self.demo_fraction}")
        if self.residual_scale < 0 or self.actor_delay < 0 or self.residual_penalty < 0:
            raise ValueError("residual_scale, actor_delay and residual_penalty must be >= 0")


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


class SACLearner(SAC):
    """The SAC of :mod:`robot_rl.learners.sac` on state vectors; :meth:`update` on RLPD batches."""

    config: SACLearnerConfig
    actor: GaussianActor

    def __init__(self, config: SACLearnerConfig, state_dims: dict[str, int], action_dim: int, seed: int = 0) -> None:
        if not config.state_keys:
            raise SpecError("state_keys: name at least one observation key")
        missing = [k for k in config.state_keys if k not in state_dims]
        if missing:
            raise SpecError(f"observation: state key(s) {missing} not among {sorted(state_dims)}")
        torch.manual_seed(seed)
        self.action_dim = int(action_dim)
        self.state_dims = {k: int(state_dims[k]) for k in config.state_keys}
        obs_dim = sum(self.state_dims.values())
        actor = GaussianActor(obs_dim, action_dim, config.hidden, config.residual_scale)
        critic_in = obs_dim + (action_dim if config.residual_scale > 0 else 0)  # a residual's critics see the base
        super().__init__(config, actor, critic_in, action_dim, action_dim, seed)

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
        metrics: dict[str, float] = {}
        for raw in batches:
            b = self._tensors(raw)
            with torch.no_grad():
                next_action, next_logp = self.actor(b["next_obs"], b["next_base"])
                soft = self.next_value(self._critic_state(b, "next_"), next_action, next_logp)
                target = b["reward"] + self.config.gamma * (1.0 - b["done"]) * soft
            critic_loss, q = self.critic_step(self._critic_state(b), b["action"], target)
            metrics["critic_loss"] = float(critic_loss)
            metrics["q_mean"] = float(q.mean())
        self.updates += 1
        if self.updates > self.config.actor_delay:
            metrics.update(self._update_actor(b))
        return metrics

    def _update_actor(self, b: dict[str, torch.Tensor]) -> dict[str, float]:
        """One actor and temperature step on batch ``b`` (the last critic batch)."""
        cfg = self.config
        action, logp = self.actor(b["obs"], b["base"])
        penalty = None
        if cfg.residual_scale > 0 and cfg.residual_penalty > 0:
            correction = (action - b["base"]) / cfg.residual_scale
            penalty = cfg.residual_penalty * correction.pow(2).mean()
        return self.actor_step(logp, self.critic(self._critic_state(b), action), penalty)

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: str | Path) -> Path:
        """Networks, optimiser moments and config into ``folder`` (written to a temp folder, then renamed)."""
        folder = Path(folder)
        tmp = folder.with_name(f".{folder.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tensors, groups = self.state_tensors()
        save_file(tensors, str(tmp / "learner.safetensors"))
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
        saved = meta["config"] if device is None else {**meta["config"], "device": device}
        config = load_config(SACLearnerConfig, saved)
        learner = cls(config, meta["state_dims"], meta["action_dim"])
        learner.load_state_tensors(load_file(str(folder / "learner.safetensors")), meta["param_groups"])
        learner.updates = int(meta["updates"])
        return learner
