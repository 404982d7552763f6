"""SAC from scratch: the project's learner (robot_rl.learners.sac_rlpd.SACLearner) on a replay of vector steps.

Why the project's learner and not stable-baselines3's SAC: it is already the SAC this project tests and
ships (tanh-Gaussian actor, LayerNorm critic ensemble with REDQ targets for high update-to-data ratios,
the recipe of Ball et al., "Efficient Online Reinforcement Learning with Offline Data", ICML 2023, and
of Learning to Fly in Seconds' fast off-policy training, Eschmann et al. 2023), it checkpoints as
safetensors, and it needs no adapter: stable-baselines3 wants its own VecEnv with same-step autoreset and
its own loop, and saves pickled zips. Here it runs with no demonstrations (``demo_fraction`` 0).

The replay (:class:`robot_rl.learners.buffers.ColumnRing`, the online learners' storage) keeps raw
observations and normalises them when a batch is drawn, with the statistics of that moment (as
stable-baselines3's VecNormalize does for off-policy algorithms), so old transitions are never stuck with
old statistics. Transitions that span an autoreset (invalid) are not stored; truncated
steps bootstrap, terminated ones do not.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from robot_rl.learners.buffers import ColumnRing
from robot_rl.learners.sac import SACConfig
from robot_rl.learners.sac_rlpd import SACLearner, SACLearnerConfig
from robot_rl.policies.mlp import MLPConfig
from robot_rl.rl.config import SACSettings
from robot_rl.rl.normalization import RunningNorm


class SACAgent:
    """SAC over ``num_envs`` envs: uniform random actions for ``learning_starts`` steps, then the actor."""

    def __init__(self, settings: SACSettings, obs_dim: int, action_dim: int, num_envs: int, norm: RunningNorm,
                 device: torch.device, initial_action: np.ndarray | None = None, seed: int = 0) -> None:
        self.settings, self.norm, self.num_envs = settings, norm, num_envs
        sac = {f.name: getattr(settings, f.name) for f in dataclasses.fields(SACConfig)} | {"device": str(device)}
        config = SACLearnerConfig(**sac, state_keys=["state"], batch_size=settings.batch_size,
                                  utd_ratio=settings.utd_ratio, demo_fraction=0.0)
        self.learner = SACLearner(config, {"state": obs_dim}, action_dim, seed=seed)
        if initial_action is not None:  # tanh(mean) starts at this action
            with torch.no_grad():
                start = torch.as_tensor(np.clip(initial_action, -0.99, 0.99), dtype=torch.float32)
                self.learner.actor.head.bias[:action_dim].copy_(torch.atanh(start))
        self.replay = ColumnRing(settings.buffer_size)
        """Raw flat steps: ``obs.state``, ``action``, ``reward``, ``next_obs.state``, ``terminated``."""
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self._obs = np.zeros((num_envs, obs_dim), np.float32)
        self._action = np.zeros((num_envs, action_dim), np.float32)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Actions (N, A) in [-1, 1] for the flat raw observations (N, D)."""
        if self.steps < self.settings.learning_starts:
            action = self.rng.uniform(-1.0, 1.0, self._action.shape).astype(np.float32)
        else:
            action = self.learner.act({"state": self.norm.normalize(obs)}).reshape(self._action.shape)
        self._obs, self._action = np.asarray(obs, np.float32), action.astype(np.float32)
        return action

    def observe(self, reward: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                valid: np.ndarray) -> None:
        """Store the valid transitions of the step."""
        self.steps += self.num_envs
        keep = np.asarray(valid, dtype=bool)
        self.replay.append_columns({"obs.state": self._obs[keep], "action": self._action[keep],
                                    "reward": np.asarray(reward, np.float32)[keep],
                                    "next_obs.state": np.asarray(next_obs, np.float32)[keep],
                                    "terminated": np.asarray(terminated, np.float32)[keep]})

    def ready(self) -> bool:
        """Random exploration is over and a batch fits in the replay."""
        return self.steps >= self.settings.learning_starts and len(self.replay) >= self.settings.batch_size

    def update(self, progress: float = 0.0) -> dict[str, float]:
        """``updates_per_step`` learner updates of ``utd_ratio`` critic steps each (``progress`` is unused)."""
        s = self.settings
        metrics: dict[str, float] = {}
        for _ in range(s.updates_per_step):
            batches = [self._sample(s.batch_size) for _ in range(s.utd_ratio)]
            metrics = self.learner.update(batches)
        out = {"value_loss": metrics.get("critic_loss", math.nan), "q_mean": metrics.get("q_mean", math.nan)}
        if "actor_loss" in metrics:
            out.update(policy_loss=metrics["actor_loss"], alpha=metrics["alpha"], entropy=metrics["entropy"])
        return out

    def _sample(self, n: int) -> dict[str, np.ndarray]:
        """A uniform batch in the columns SACLearner.update reads, observations normalised now."""
        batch = self.replay.rows(self.replay.sample_indices(n, self.rng))
        for key in ("obs.state", "next_obs.state"):
            batch[key] = self.norm.normalize(batch[key])
        return batch

    def finite(self) -> bool:
        """Every actor and critic weight is finite."""
        modules = (self.learner.actor, self.learner.critic)
        return all(bool(torch.isfinite(p).all()) for m in modules for p in m.parameters())

    def policy_config(self, obs_clip: float) -> MLPConfig:
        """The exported policy's settings (the tanh-Gaussian actor with LayerNorm, mean only)."""
        h = self.settings.hidden
        return MLPConfig(hidden=(h, h), activation="relu", layer_norm=True, head_outputs=2, squash="tanh",
                         obs_clip=obs_clip)

    def actor_state(self) -> dict[str, torch.Tensor]:
        """The actor's trunk and head, named as :func:`robot_rl.policies.mlp.build_mlp` names them."""
        actor = self.learner.actor
        state = {k: v.detach().cpu().clone() for k, v in actor.trunk.state_dict().items()}
        head = len(actor.trunk)
        state.update({f"{head}.{k}": v.detach().cpu().clone() for k, v in actor.head.state_dict().items()})
        return state
