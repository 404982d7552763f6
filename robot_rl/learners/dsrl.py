"""DSRL: reinforcement learning in the latent-noise space of a frozen diffusion / flow / MeanFlow policy.

Wagenmaker et al., "Steering Your Diffusion Policy with Latent Space Reinforcement Learning"
(arXiv:2506.15799): a generative policy maps (observation, Gaussian noise w) to an action chunk, so an RL
agent that picks w instead of drawing it steers the policy without touching its weights. Everything it
can do stays on the policy's learned manifold, and no gradient ever goes through the denoiser.

This is the noise-aliased variant (DSRL-NA):

* an action critic Q_A(s, a) learns by TD on the EXECUTED actions (the first ``action_steps`` of the
  chunk), so off-policy data and human interventions, whose noise nobody knows, still teach it;
* a noise critic Q_W(s, w) is distilled from Q_A(s, base(s, w)) on sampled noises: many noises decode to
  almost the same chunk (aliasing), and the distillation gives them the same value;
* a tanh-Gaussian SAC actor over w in [-noise_scale, noise_scale]^(H*A) maximises Q_W.

The base policy is frozen: gradients off, no optimiser over it, weights checked by fingerprint when a
checkpoint is loaded. One decision is one chunk: ``reward`` is the chunk's (discounted) return and
``gamma`` the discount per decision. Actor, action critic (with its targets) and temperature are the
project's one SAC (:mod:`robot_rl.learners.sac`), its TD target the min over a random subset of target
critics (REDQ). Checkpoints: safetensors + JSON.
:func:`decisions_from_steps` turns the per-step stream of the actors into such decisions.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.core.config import config_to_dict, load_config
from robot_rl.core.device import resolve_device
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.sac import SAC, CriticEnsemble, GaussianActor, SACConfig, optimizer_step
from robot_rl.policies.base import CheckpointError, Policy

FORMAT = "robot_rl.dsrl"
WEIGHTS_FILE = "dsrl.safetensors"
META_FILE = "dsrl.json"


@dataclass
class DSRLConfig(SACConfig):
    """SAC's hyperparameters (:class:`robot_rl.learners.sac.SACConfig`, here over the noise) and DSRL-NA's."""

    num_critics: int = 2
    """Ensemble size of each critic (action and noise)."""
    gamma: float = 0.99
    """Discount per decision (one chunk)."""
    backup_entropy: bool = False
    """Add the entropy bonus -alpha * log pi(w) to the action critic's TD target (soft Q). Off by default: the
    noise has H * A dimensions (112 for a 16 x 7 chunk), and its entropy bonus summed over an episode
    outweighs a sparse success reward; without it Q stays within the task's returns."""
    state_keys: list[str] | None = None
    """Observation keys (their normalised histories, flattened) fed to actor and critics; None: the base
    policy's state keys. Images only reach the base policy."""
    noise_scale: float = 1.5
    """The actor's noise lies in [-noise_scale, noise_scale] per dimension (tanh * scale; the paper bounds
    the latent action space the same way, so the policy never sees noise far outside its training range)."""
    action_steps: int | None = None
    """Executed actions per decision, scored by the action critic; None: the base policy's
    ``executor.n_action_steps``."""
    num_steps: int | None = None
    """Denoising / integration steps of the base policy; None: its own default."""
    prior_weight: float = 0.0
    """Weight of 0.5 * mean(w^2) in the actor's loss: the negative log-density of the base's N(0, I) noise
    prior, which keeps the chosen noise where the base policy was trained (a trust region around the prior;
    0: plain SAC in noise space)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.state_keys is not None and not self.state_keys:
            raise ValueError("state_keys: name at least one observation key, or None for the policy's")
        if not 0.0 < self.noise_scale <= 5.0:
            raise ValueError(f"noise_scale: must be in (0, 5], got {self.noise_scale}")
        if self.action_steps is not None and self.action_steps < 1:
            raise ValueError(f"action_steps: must be >= 1 or None, got {self.action_steps}")
        if self.num_steps is not None and self.num_steps < 1:
            raise ValueError(f"num_steps: must be >= 1 or None, got {self.num_steps}")
        if self.prior_weight < 0:
            raise ValueError(f"prior_weight: must be >= 0, got {self.prior_weight}")


def policy_fingerprint(policy: Policy) -> str:
    """SHA-256 of the policy's type and tensors: a DSRL checkpoint only loads beside the same base policy."""
    digest = hashlib.sha256(policy.name.encode())
    for name, tensor in sorted(policy.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class DSRLLearner(SAC):
    """SAC over the noise (:mod:`robot_rl.learners.sac`) plus the noise critic Q_W; the base stays frozen.

    SAC's critic (and its targets) is the action critic Q_A; its actor picks the noise.
    """

    config: DSRLConfig

    def __init__(self, config: DSRLConfig, policy: Policy, seed: int = 0) -> None:
        if getattr(policy.config, "sampler", "") == "ddpm":
            raise SpecError("policy: DDPM sampling draws fresh noise at every step, so the initial noise does not "
                            "determine the chunk; use DDIM (sampler: ddim)")
        keys = list(config.state_keys) if config.state_keys is not None else list(policy.state_keys)
        if not keys:
            raise SpecError("state_keys: actor and critics read state vectors, and the policy has none; name some")
        missing = [k for k in keys if k not in policy.spec.state_dims]
        if missing:
            raise SpecError(f"observation: state key(s) {missing} not among the policy's {policy.state_keys}")
        steps = config.action_steps if config.action_steps is not None else policy.config.executor.n_action_steps
        if steps > policy.config.horizon:
            raise SpecError(f"action_steps: {steps} exceeds the policy's horizon {policy.config.horizon}")
        torch.manual_seed(seed)
        device = resolve_device(config.device)
        self.policy = policy.requires_grad_(False).eval().to(device)
        """The frozen base policy."""
        self.state_dims = {k: int(policy.spec.state_dims[k]) for k in keys}
        self.n_obs_steps, self.horizon = policy.config.n_obs_steps, policy.config.horizon
        self.action_dim, self.action_steps = policy.spec.action_dim, int(steps)
        obs_dim = self.n_obs_steps * sum(self.state_dims.values())
        noise_dim = self.horizon * self.action_dim
        actor = GaussianActor(obs_dim, noise_dim, config.hidden, residual_scale=0.0)
        super().__init__(config, actor, obs_dim, self.action_steps * self.action_dim, noise_dim, seed)
        self.q_noise = CriticEnsemble(config.num_critics, obs_dim, noise_dim, config.hidden).to(self.device)
        """Q_W(s, w), distilled from the action critic Q_A(s, base(s, w))."""
        self.q_noise_opt = torch.optim.Adam(self.q_noise.parameters(), lr=config.lr)
        self.fingerprint = policy_fingerprint(policy)

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimiser by its checkpoint name."""
        return self.checkpoint_names()[1]

    def checkpoint_names(self) -> tuple[dict[str, nn.Module], dict[str, torch.optim.Optimizer], str]:
        """DSRL's names: the critic is ``q_action`` (targets ``q_action_target``), optimisers under ``opt.``."""
        return ({"actor": self.actor, "q_action": self.critic, "q_action_target": self.target, "q_noise": self.q_noise},
                {"actor": self.actor_opt, "q_action": self.critic_opt, "q_noise": self.q_noise_opt,
                 "alpha": self.alpha_opt}, "opt.")

    # ------------------------------------------------------------------ acting
    def state_vector(self, obs: Mapping[str, Any]) -> tuple[torch.Tensor, bool]:
        """(B, To * D) normalised, flattened histories of the state keys, and whether ``obs`` was unbatched."""
        parts, single = [], None
        for key, dim in self.state_dims.items():
            if key not in obs:
                raise SpecError(f"observation.{key}: missing")
            arr = np.asarray(obs[key], dtype=np.float32)
            is_single = arr.shape == (self.n_obs_steps, dim)
            if not is_single and (arr.ndim != 3 or arr.shape[1:] != (self.n_obs_steps, dim)):
                raise SpecError(f"observation.{key}: expected ({self.n_obs_steps}, {dim}) or batched "
                                f"(B, {self.n_obs_steps}, {dim}), got {arr.shape}")
            if single is not None and single != is_single:
                raise SpecError(f"observation.{key}: batched and unbatched keys mixed")
            if not np.all(np.isfinite(arr)):
                raise SpecError(f"observation.{key}: contains NaN or inf")
            single = is_single
            x = torch.from_numpy(arr[None] if is_single else arr).to(self.device)
            parts.append(self.policy.normalizer.normalize(key, x).flatten(1))
        return torch.cat(parts, -1), bool(single)

    def sample_noise(self, state: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(noise (B, H, A) in [-noise_scale, noise_scale], log-probability of the squashed sample (B,))."""
        squashed, logp = self.actor(state, None, deterministic)
        return self.config.noise_scale * squashed.reshape(-1, self.horizon, self.action_dim), logp

    def decode(self, obs: Mapping[str, Any], noise: torch.Tensor) -> torch.Tensor:
        """The base policy's normalised chunk (B, H, A) for batched ``obs`` and ``noise``; no gradient."""
        chunk = self.policy.predict_chunk(obs, self.config.num_steps, noise=noise)
        return self.policy.normalizer.normalize("action", torch.from_numpy(chunk).to(self.device))

    @torch.no_grad()
    def act(self, obs_history: Mapping[str, Any], deterministic: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(noise, raw chunk): (H, A) each for one history {key: (To, ...)}, (B, H, A) for a batch."""
        state, single = self.state_vector(obs_history)
        noise, _ = self.sample_noise(state, deterministic)
        noise = noise[0] if single else noise
        return noise.cpu().numpy(), self.policy.predict_chunk(obs_history, self.config.num_steps, noise=noise)

    # ------------------------------------------------------------------ learning
    def _executed(self, actions: Any, batch: int) -> torch.Tensor:
        """Raw executed actions (B, action_steps, A) -> normalised and flattened (B, action_steps * A)."""
        arr = np.asarray(actions, dtype=np.float32)
        if arr.shape != (batch, self.action_steps, self.action_dim):
            raise SpecError(f"action: expected ({batch}, {self.action_steps}, {self.action_dim}) executed actions, "
                            f"got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise SpecError("action: contains NaN or inf")
        return self.policy.normalizer.normalize("action", torch.from_numpy(arr).to(self.device)).flatten(1)

    def update(self, batch: Mapping[str, Any]) -> dict[str, float]:
        """One step of each: action critic (TD), noise critic (distillation), actor and temperature.

        ``batch``: ``obs.<key>`` and ``next_obs.<key>`` (B, To, ...) histories of every key the base policy
        reads, ``action`` (B, action_steps, A) the raw executed actions (the policy's or a human's),
        ``reward`` (B,) the decision's return and ``terminated`` (B,).
        """
        cfg = self.config
        obs = {k[4:]: np.asarray(v) for k, v in batch.items() if k.startswith("obs.")}
        nxt = {k[9:]: np.asarray(v) for k, v in batch.items() if k.startswith("next_obs.")}
        state, _ = self.state_vector(obs)
        next_state, _ = self.state_vector(nxt)
        b = state.shape[0]
        action = self._executed(batch["action"], b)
        reward = torch.as_tensor(np.asarray(batch["reward"], np.float32), device=self.device).reshape(b)
        live = np.flatnonzero(~np.asarray(batch["terminated"], bool).reshape(b))  # rows that bootstrap
        n = self.action_steps

        # action critic: TD on executed actions; the next action is the base policy steered by the actor
        with torch.no_grad():
            target = reward.clone()
            if len(live):
                idx = torch.from_numpy(live).to(self.device)
                next_noise, next_logp = self.sample_noise(next_state[idx])
                next_action = self.decode({k: v[live] for k, v in nxt.items()}, next_noise)[:, :n].flatten(1)
                target[idx] += cfg.gamma * self.next_value(next_state[idx], next_action, next_logp)
        q_action_loss, q = self.critic_step(state, action, target)

        # noise critic: distilled from Q_A(s, base(s, w)) on prior noises (clipped to the actor's range) and
        # on the actor's own, so it is right both everywhere and where the actor looks
        with torch.no_grad():
            prior = torch.randn((b, self.horizon, self.action_dim), generator=self.rng).to(self.device)
            noise = torch.cat([prior.clamp(-cfg.noise_scale, cfg.noise_scale), self.sample_noise(state)[0]])
            both = {k: np.concatenate([v, v]) for k, v in obs.items()}
            states2 = torch.cat([state, state])
            distill = self.critic(states2, self.decode(both, noise)[:, :n].flatten(1)).mean(0)
        q_noise = self.q_noise(states2, noise.flatten(1))
        q_noise_loss = ((q_noise - distill) ** 2).mean()
        optimizer_step(self.q_noise_opt, self.q_noise, q_noise_loss, cfg.grad_clip)

        # actor and temperature (SAC in noise space)
        noise_pi, logp = self.sample_noise(state)
        prior_loss = cfg.prior_weight * 0.5 * noise_pi.pow(2).mean() if cfg.prior_weight > 0 else None
        metrics = self.actor_step(logp, self.q_noise(state, noise_pi.flatten(1)), prior_loss)
        self.updates += 1
        return {"q_action_loss": float(q_action_loss), "q_noise_loss": float(q_noise_loss.detach()),
                "q_mean": float(q.mean()), **metrics, "noise_rms": float(noise_pi.detach().pow(2).mean().sqrt())}

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: str | Path) -> Path:
        """Networks, optimiser moments, temperature and RNG into ``folder``; the JSON is written last.

        The base policy is not saved (it has its own checkpoint); its fingerprint is, so :meth:`load` refuses
        a different one.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors, groups = self.state_tensors()
        tmp = folder / f".{WEIGHTS_FILE}.tmp"
        save_file(tensors, str(tmp))
        os.replace(tmp, folder / WEIGHTS_FILE)
        meta = {"format": FORMAT, "config": config_to_dict(self.config), "updates": self.updates,
                "param_groups": groups, "policy": {"type": self.policy.name, "spec": self.policy.spec.to_json(),
                                                   "fingerprint": self.fingerprint}}
        tmp = folder / f".{META_FILE}.tmp"
        tmp.write_text(json.dumps(meta, indent=2), encoding="utf-8")
        os.replace(tmp, folder / META_FILE)
        return folder

    @classmethod
    def load(cls, folder: str | Path, policy: Policy, device: str | None = None) -> DSRLLearner:
        """Rebuild a learner from :meth:`save` beside the SAME base policy (checked); ``device`` overrides."""
        folder = Path(folder)
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{folder}: no readable {META_FILE} ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CheckpointError(f"{folder}: not a DSRL learner checkpoint")
        if meta["policy"]["fingerprint"] != policy_fingerprint(policy):
            raise CheckpointError(f"{folder}: was trained on a different base policy ({meta['policy']['type']}, "
                                  f"fingerprint {meta['policy']['fingerprint'][:12]}); this one is {policy.name}")
        config = load_config(DSRLConfig, meta["config"] if device is None else {**meta["config"], "device": device})
        learner = cls(config, policy)
        learner.load_state_tensors(load_file(str(folder / WEIGHTS_FILE)), meta["param_groups"])
        learner.updates = int(meta["updates"])
        return learner


# ---------------------------------------------------------------------------------------- step stream -> decisions
def decisions_from_steps(transitions: Sequence[Transition], n_obs_steps: int, action_steps: int,
                         stride: int | None = None) -> dict[str, np.ndarray]:
    """Per-step transitions (actors stream those) -> the decision columns :meth:`DSRLLearner.update` reads.

    A decision starts every ``stride`` steps (default ``action_steps``) of each run of consecutive steps of
    an episode: the observation history there (the run's first frame repeated, as the policy runner does),
    the ``action_steps`` actions executed next, whoever executed them (the action critic only needs what was
    done, so human steps count), their summed reward and the history after them. Stride 1 uses every step
    as a start: each (s, executed actions) pair is a valid sample for Q_A. A decision cut short is kept only
    when its last step is terminal (its actions padded with the last one); otherwise the rest of the episode
    has not arrived yet or was lost. Extra columns: ``is_intervention`` (a human acted in it), ``steps``.
    """
    if n_obs_steps < 1 or action_steps < 1 or (stride is not None and stride < 1):
        raise ValueError("n_obs_steps, action_steps and stride must be >= 1")
    stride = action_steps if stride is None else stride
    ordered = sorted(transitions, key=lambda t: (t.episode_id, t.step))
    runs: list[list[Transition]] = []
    for t in ordered:
        if runs and runs[-1][-1].episode_id == t.episode_id and runs[-1][-1].step + 1 == t.step:
            runs[-1].append(t)
        else:
            runs.append([t])
    rows: list[dict[str, Any]] = []
    for run in runs:
        frames = [t.observation for t in run] + [run[-1].next_observation]

        def history(i: int, frames: list[Mapping[str, np.ndarray]] = frames) -> dict[str, np.ndarray]:
            picks = [frames[max(0, j)] for j in range(i - n_obs_steps + 1, i + 1)]
            return {k: np.stack([f[k] for f in picks]) for k in frames[0]}

        for i in range(0, len(run), stride):
            seg = run[i:i + action_steps]
            if len(seg) < action_steps and not seg[-1].terminated:
                continue
            actions = [t.action for t in seg] + [seg[-1].action] * (action_steps - len(seg))
            rows.append({"obs": history(i), "next_obs": history(i + len(seg)), "action": np.stack(actions),
                         "reward": sum(t.reward for t in seg), "terminated": seg[-1].terminated,
                         "is_intervention": any(t.is_intervention for t in seg), "steps": len(seg)})
    if not rows:
        raise ValueError("decisions_from_steps: no complete decision in these steps")
    out: dict[str, np.ndarray] = {}
    for part in ("obs", "next_obs"):
        for key in rows[0][part]:
            out[f"{part}.{key}"] = np.stack([r[part][key] for r in rows])
    out["action"] = np.stack([r["action"] for r in rows]).astype(np.float32)
    out["reward"] = np.asarray([r["reward"] for r in rows], np.float32)
    out["terminated"] = np.asarray([r["terminated"] for r in rows], bool)
    out["is_intervention"] = np.asarray([r["is_intervention"] for r in rows], bool)
    out["steps"] = np.asarray([r["steps"] for r in rows], np.int64)
    return out
