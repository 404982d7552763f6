"""PPO from rsl_rl (``rsl-rl-lib``), driven by our loop.

rsl_rl is the legged-robot community's PPO (Rudin et al., "Learning to Walk in Minutes Using Massively
Parallel Deep Reinforcement Learning", CoRL 2021; Isaac Lab trains with it).

We use rsl_rl's ``PPO`` algorithm, ``MLPModel`` actor and critic and ``RolloutStorage`` as they are
(clipped surrogate and value loss, GAE, KL-adaptive learning rate, time-out bootstrapping) and not its
``OnPolicyRunner``: the runner owns the loop, so it cannot stop on a wall-clock budget or a target
success rate, show a tqdm bar, evaluate the exported policy or keep the last good checkpoint when a loss
turns NaN, and it checkpoints with ``torch.save`` (pickle) where the project's policies are safetensors.

Two things rsl_rl assumes that our envs do differently, handled here:

* Observations are normalised outside (robot_rl.rl.normalization, the same statistics the exported policy
  carries), so rsl_rl's own ``obs_normalization`` is off.
* rsl_rl expects same-step autoreset (Isaac Lab's); our vector envs reset on the NEXT step, whose
  transition spans two episodes. The loop marks it invalid; after GAE its advantage is set to 0 and its
  return to its value, so it moves neither the policy nor the value function.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from robot_rl.policies.mlp import MLPConfig
from robot_rl.rl.config import PPOSettings
from robot_rl.rl.normalization import RunningNorm

GAUSSIAN = "rsl_rl.modules.distribution:GaussianDistribution"
"""rsl_rl's state-independent diagonal Gaussian (log-std parameter)."""


class PPOAgent:
    """rsl_rl PPO over ``num_envs`` envs; actions in normalised units (unbounded samples, clipped by the env spec)."""

    def __init__(self, settings: PPOSettings, obs_dim: int, action_dim: int, num_envs: int, norm: RunningNorm,
                 device: torch.device, initial_action: np.ndarray | None = None, critic_dim: int | None = None) -> None:
        from rsl_rl.algorithms import PPO
        from rsl_rl.models import MLPModel
        from rsl_rl.storage import RolloutStorage

        self.settings, self.norm, self.device, self.num_envs = settings, norm, device, num_envs
        self.obs_dim = obs_dim
        self.asymmetric = critic_dim is not None and critic_dim > obs_dim
        example = self._obs(np.zeros((num_envs, critic_dim or obs_dim), np.float32))
        groups = {"actor": ["policy"], "critic": ["critic" if self.asymmetric else "policy"]}
        hidden = tuple(settings.hidden)
        self.actor = MLPModel(example, groups, "actor", action_dim, hidden_dims=hidden, activation=settings.activation,
                              distribution_cfg={"class_name": GAUSSIAN, "init_std": settings.init_std,
                                                "std_type": "log"})
        self.critic = MLPModel(example, groups, "critic", 1, hidden_dims=hidden, activation=settings.activation)
        if initial_action is not None:  # the mean starts at this action wherever the observation is
            with torch.no_grad():
                self.actor.mlp[-1].bias.copy_(torch.as_tensor(initial_action, dtype=torch.float32))
        storage = RolloutStorage("rl", num_envs, settings.steps_per_env, example, [action_dim], device=str(device))
        self.alg = PPO(self.actor, self.critic, storage, num_learning_epochs=settings.epochs,
                       num_mini_batches=settings.mini_batches, clip_param=settings.clip_param, gamma=settings.gamma,
                       lam=settings.lam, value_loss_coef=settings.value_loss_coef, entropy_coef=settings.entropy_coef,
                       learning_rate=settings.learning_rate, max_grad_norm=settings.max_grad_norm,
                       schedule=settings.schedule, desired_kl=settings.desired_kl, device=str(device))
        self.alg.train_mode()
        self._valid = np.ones((settings.steps_per_env, num_envs), dtype=bool)
        self._t = 0
        self._updates = 0
        self._last: TensorDict | None = None

    def _obs(self, flat: np.ndarray) -> TensorDict:
        """The actor's group ``policy`` (the first ``obs_dim`` entries); with critic-only keys also ``critic`` (all)."""
        x = torch.from_numpy(self.norm.normalize(flat)).to(self.device)
        groups = {"policy": x[:, :self.obs_dim], "critic": x} if self.asymmetric else {"policy": x}
        return TensorDict(groups, batch_size=[x.shape[0]], device=self.device)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Sample actions (N, A) for the flat raw observations (N, D) and record the step's first half."""
        with torch.inference_mode():
            return self.alg.act(self._obs(obs)).cpu().numpy()

    def observe(self, reward: np.ndarray, next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                valid: np.ndarray) -> None:
        """Record the step's outcome; ``valid`` False marks next-step-autoreset transitions."""
        nxt = self._obs(next_obs)
        dev = self.device
        with torch.inference_mode():
            self.alg.process_env_step(nxt, torch.as_tensor(reward, dtype=torch.float32, device=dev),
                                      torch.as_tensor(terminated | truncated, device=dev),
                                      {"time_outs": torch.as_tensor(truncated, dtype=torch.float32, device=dev)})
        self._valid[self._t] = valid
        self._t += 1
        self._last = nxt

    def ready(self) -> bool:
        """A full rollout is stored."""
        return self._t >= self.settings.steps_per_env

    def update(self, progress: float = 0.0) -> dict[str, float]:
        """GAE, mask the autoreset steps, then rsl_rl's PPO epochs; returns the mean losses.

        ``progress`` (0..1, the share of the run's budget spent) sets the learning rate when ``anneal_lr``.
        """
        assert self._last is not None
        if self.settings.anneal_lr:
            self.alg.learning_rate = self.settings.learning_rate * max(0.0, 1.0 - progress)
            for group in self.alg.optimizer.param_groups:
                group["lr"] = self.alg.learning_rate
        with torch.inference_mode():
            self.alg.compute_returns(self._last)
            storage = self.alg.storage
            invalid = torch.from_numpy(~self._valid).to(self.device)[..., None]
            storage.advantages[invalid] = 0.0
            storage.returns[invalid] = storage.values[invalid]
        frozen = ({k: v.detach().clone() for k, v in self.actor.state_dict().items()}
                  if self._updates < self.settings.critic_warmup_updates else None)
        losses = self.alg.update()
        if frozen is not None:  # value-function warm-up: the actor stays as it started
            self.actor.load_state_dict(frozen)
        self._updates += 1
        self._t = 0
        self._valid[:] = True
        std = self.actor.distribution.log_std_param.detach().exp()
        return {"value_loss": float(losses["value"]), "policy_loss": float(losses["surrogate"]),
                "entropy": float(losses["entropy"]), "learning_rate": float(self.alg.learning_rate),
                "action_std": float(std.mean())}

    def finite(self) -> bool:
        """Every actor and critic weight is finite."""
        return all(bool(torch.isfinite(p).all()) for p in (*self.actor.parameters(), *self.critic.parameters()))

    def policy_config(self, obs_clip: float) -> MLPConfig:
        """The exported policy's settings (the actor's MLP, clipped Gaussian mean)."""
        s = self.settings
        return MLPConfig(hidden=tuple(s.hidden), activation=s.activation, squash="clip", obs_clip=obs_clip)

    def load_actor(self, state: dict[str, torch.Tensor]) -> None:
        """Start the actor's MLP from ``state`` (named as :meth:`actor_state` returns them)."""
        self.actor.mlp.load_state_dict(state, strict=True)

    def actor_state(self) -> dict[str, torch.Tensor]:
        """The actor MLP's tensors, named as :func:`robot_rl.policies.mlp.build_mlp` names them."""
        return {k: v.detach().cpu().clone() for k, v in self.actor.mlp.state_dict().items()}
