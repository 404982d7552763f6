"""Residual RL on a frozen base in the online runner: SAC learns a bounded per-step correction.

ResFiT (Ankile et al., "Residual Off-Policy RL for Finetuning Behavior Cloning Policies",
arXiv:2509.19301) and Policy Decorator (Yuan et al., 2024) keep the base controller frozen and learn only
a small additive correction: the base already solves most of the task, so exploration stays near it and
the correction cannot wander far. Here the base is a chunked policy checkpoint (run by a PolicyRunner)
or the env's scripted expert (the quadrotor and humanoid tasks, whose expert is the controller to
improve). The RL actor sees the state keys and the base action and executes
``clip(base + scale * tanh(u), -1, 1)``; the critic ensemble scores the executed action (SAC in the RLPD
recipe, :mod:`robot_rl.learners.sac_rlpd`).

Pieces, top to bottom:

* :class:`ResidualConfig`: the ``learner.residual`` section of the online config;
* :class:`TaskReward`: what the actors store as reward (the env's sparse success by default);
* :class:`ResidualAgent`: base + the newest published residual, swapped between steps, on the actor;
* :class:`ResidualAlgorithm`: the learner side (buffers, warm-up, updates, publish, checkpoint).

During warm-up nothing is published and the actors execute the base action unchanged, bit for bit: the
buffers fill with what the base does before the residual may move (ResFiT's warm-up). Human steps go
into both buffers (the online one and the intervention one that supplies RLPD's other half of every
batch); their executed action is the human's. A learner whose loss or weights turn non-finite stops
training and publishing, keeps the last good version and says why; its checkpoint keeps the last good
state.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from robot_rl.core.config import config_to_dict
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.buffers import ReplayBuffer, mixed_sample
from robot_rl.learners.sac_rlpd import GaussianActor, SACConfig, SACLearner, state_array
from robot_rl.learners.transport import WeightsWatcher
from robot_rl.runtime.episode import act as agent_action
from robot_rl.runtime.episode import reset_agent

MARKER = "residual.json"
"""The file that marks a complete published ``weights/v<N>/`` residual folder (a PolicyRunner's is policy.json)."""
FORMAT = "robot_rl.residual_actor"


@dataclass
class ResidualConfig:
    """Residual RL on a frozen base (``learner.algorithm: residual``)."""

    base: str = "policy"
    """What the residual corrects: ``policy`` (the run's ``policy`` checkpoint, chunked, run by a
    PolicyRunner) or ``expert`` (the env's scripted expert, e.g. the quadrotor's hover controller)."""
    scale: float = 0.1
    """Largest correction per action dimension (actions live in [-1, 1]); sets SAC's residual_scale."""
    warmup_steps: int = 1000
    """Steps received before the first update: until then the actors execute the base action exactly
    and the learner only fills its buffers."""
    state_keys: list[str] = field(default_factory=list)
    """Observation keys the actor and critics see (besides the base action); empty: every 1-D float key of
    the first transition, sorted by name."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC / RLPD settings; its ``state_keys``, ``residual_scale`` and ``device`` are set from this section
    and ``learner.device``."""
    reward: str = "success"
    """Reward the actors store: ``success`` (1 on steps where the env reports ``is_success``, else 0) or
    ``env`` (the env's shaped reward; an explicit choice, since shaped terms can be gamed)."""
    intervention_penalty: float = 0.0
    """Subtracted from the reward of the policy step after which a human took over (RLIF-style signal)."""
    explore: bool = True
    """Actors sample the residual (SAC's exploration); False: its mean (evaluation)."""
    seed: int = 0
    """Seed of the networks and the batch sampler."""

    def __post_init__(self) -> None:
        if self.base not in ("policy", "expert"):
            raise ValueError(f"base: must be 'policy' or 'expert', got {self.base!r}")
        if self.reward not in ("success", "env"):
            raise ValueError(f"reward: must be 'success' or 'env', got {self.reward!r}")
        if not self.scale > 0 or self.warmup_steps < 0:
            raise ValueError(f"scale must be > 0 and warmup_steps >= 0, got {self.scale}, {self.warmup_steps}")
        if not math.isfinite(self.intervention_penalty) or self.intervention_penalty < 0:
            raise ValueError(f"intervention_penalty: must be finite and >= 0, got {self.intervention_penalty}")


# ------------------------------------------------------------------------------------------ reward
class TaskReward(gym.Wrapper):
    """The reward the actors record: sparse success (default) or the env's own shaped reward."""

    def __init__(self, env: gym.Env[Any, Any], mode: str) -> None:
        super().__init__(env)
        if mode not in ("success", "env"):
            raise ValueError(f"reward: must be 'success' or 'env', got {mode!r}")
        self.mode = mode

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The env's step with the reward replaced by ``float(info["is_success"])`` in ``success`` mode."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.mode == "success":
            reward = float(bool(info.get("is_success", False)))
        return obs, float(reward), bool(terminated), bool(truncated), info


# ------------------------------------------------------------------------------------------ actor side
class ResidualActorWeights:
    """A published residual actor: the network, its input keys and its version."""

    def __init__(self, actor: GaussianActor, state_dims: dict[str, int], action_dim: int, version: int) -> None:
        self.actor, self.state_dims, self.action_dim, self.version = actor, state_dims, action_dim, version

    @staticmethod
    def write(folder: Path, actor: GaussianActor, state_dims: Mapping[str, int], action_dim: int, hidden: int,
              version: int, extra: Mapping[str, Any]) -> None:
        """``residual.safetensors`` + ``residual.json`` (the marker, written last) into ``folder``."""
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in actor.state_dict().items()},
                  str(folder / "residual.safetensors"))
        meta = {"format": FORMAT, "version": version, "state_dims": dict(state_dims), "action_dim": action_dim,
                "hidden": hidden, "scale": actor.residual_scale, **extra}
        (folder / MARKER).write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> ResidualActorWeights:
        """Read a published folder; raises SpecError / OSError for a broken one."""
        folder = Path(folder)
        meta = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise SpecError(f"{folder}: not a residual actor ({MARKER} format {meta.get('format')!r})")
        dims = {str(k): int(v) for k, v in meta["state_dims"].items()}
        with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten: leave torch's RNG alone
            actor = GaussianActor(sum(dims.values()), int(meta["action_dim"]), int(meta["hidden"]),
                                  float(meta["scale"]))
        actor.load_state_dict(load_file(str(folder / "residual.safetensors")), strict=True)
        if not all(bool(torch.isfinite(p).all()) for p in actor.parameters()):
            raise SpecError(f"{folder}: non-finite weights")
        return cls(actor.eval(), dims, int(meta["action_dim"]), int(meta["version"]))


class BaseActionView:
    """The ``base_agent`` of :func:`robot_rl.runtime.episode.run_episode`: the base action of this step.

    It is the action the :class:`ResidualAgent` computed (asking a chunked base twice would advance it twice).
    """

    def __init__(self, agent: ResidualAgent) -> None:
        self.agent = agent

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The base action of the step just proposed."""
        if self.agent.last_base is None:
            raise RuntimeError("base_action asked before the residual agent acted")
        return self.agent.last_base


class ResidualAgent:
    """``act(obs)``: the frozen base's action plus the newest published residual (none yet: the base's).

    New versions in ``weights_dir`` are looked for before every step and swapped in between steps.
    """

    def __init__(self, base: Any, weights_dir: str | Path | None = None, deterministic: bool = False,
                 residual: ResidualActorWeights | None = None) -> None:
        self.base, self.deterministic, self.residual = base, deterministic, residual
        self.watcher = None if weights_dir is None else WeightsWatcher(weights_dir, marker=MARKER)
        self.last_base: np.ndarray | None = None
        self.refused: dict[int, str] = {}
        """Published versions that could not be loaded, with the reason (the running version keeps acting)."""
        self.base_view = BaseActionView(self)
        """Pass as ``run_episode(..., base_agent=agent.base_view)``."""
        self.generator = torch.Generator()

    @property
    def version(self) -> int:
        """The residual version acting now (0: none, the base alone)."""
        return 0 if self.residual is None else self.residual.version

    def reset(self, seed: int | None = None) -> None:
        """New episode: reset the base; ``seed`` fixes the exploration noise."""
        reset_agent(self.base, seed)
        if seed is not None:
            self.generator.manual_seed(int(seed))

    def poll_weights(self) -> None:
        """Swap in the newest published residual, if any (a broken folder is refused, the current one kept)."""
        found = None if self.watcher is None else self.watcher.poll()
        if found is None:
            return
        version, folder = found
        try:
            self.residual = ResidualActorWeights.load(folder)
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:  # pruned, half-copied, mismatched
            self.refused[version] = str(exc)

    @torch.no_grad()
    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Base action + residual correction for this step."""
        self.poll_weights()
        base = agent_action(self.base, obs)
        self.last_base = base
        if self.residual is None:
            return base.copy()  # warm-up: exactly the base action
        state = torch.from_numpy(state_array(dict(obs), self.residual.state_dims))
        action, _ = self.residual.actor(state, torch.from_numpy(base)[None], self.deterministic, self.generator)
        return action[0].numpy()

    __call__ = act


def build_base(kind: str, env: gym.Env[Any, Any], policy: str, device: str = "cpu") -> Any:
    """The frozen base of an actor: the env's scripted expert or a PolicyRunner over ``policy`` (no swaps)."""
    if kind == "expert":
        from robot_rl.sim.experts import expert_for

        return expert_for(env)
    if not policy:
        raise ValueError("residual.base: policy needs the run's 'policy' checkpoint folder")
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.policy_runner import PolicyRunner

    return PolicyRunner(Policy.load(policy), device=device)


# ------------------------------------------------------------------------------------------ learner side
class ResidualAlgorithm:
    """The learner's side of residual RL (see the module docstring); driven by the online learner.

    The networks are built from the first transitions (their observation shapes and action size), so the
    learner never loads the base. ``checkpoint`` holds ``steps/``, ``interventions/`` and ``sac/``.
    """

    marker = MARKER

    def __init__(self, cfg: ResidualConfig, checkpoint: str | Path, capacity: int, update_to_data: float,
                 updates_per_cycle: int, device: str = "auto") -> None:
        self.cfg, self.ckpt = cfg, Path(checkpoint)
        self.update_to_data, self.updates_per_cycle, self.device = update_to_data, updates_per_cycle, device
        self.steps = ReplayBuffer(capacity)
        """Every received step (RLPD's online buffer)."""
        self.interventions = ReplayBuffer(capacity)
        """The human-controlled steps (RLPD's demo half of each batch)."""
        self.sac: SACLearner | None = None
        self.updates = 0
        self.failure: str | None = None
        """Why training stopped (non-finite loss or weights); None while healthy."""
        self.resumed_from: dict[str, int] | None = None
        self.rng = np.random.default_rng(cfg.seed)
        self._held: dict[int, Transition] = {}
        if (self.ckpt / "sac" / "learner.json").is_file():
            self.sac = SACLearner.load(self.ckpt / "sac", device=device)
            self.updates = self.sac.updates
            self.steps = ReplayBuffer.load(self.ckpt / "steps", capacity=capacity)
            self.interventions = ReplayBuffer.load(self.ckpt / "interventions", capacity=capacity)
            self.resumed_from = self.counters() | {"updates": self.updates}

    def counters(self) -> dict[str, int]:
        """Steps and human steps received so far."""
        return {"steps": self.steps.total_added, "human_steps": self.interventions.total_added}

    # ---------------------------------------------------------------- data
    def add(self, transitions: Sequence[Transition]) -> None:
        """Route steps into the buffers: all online, human ones also into the intervention buffer.

        Each episode's newest step is held back until the next one arrives, so that the policy step after
        which a human took over can carry ``intervention_penalty``.
        """
        ready: list[Transition] = []
        for t in transitions:
            prev = self._held.pop(t.episode_id, None)
            if prev is not None:
                if t.is_intervention and not prev.is_intervention and self.cfg.intervention_penalty:
                    prev = prev.replace(reward=prev.reward - self.cfg.intervention_penalty)
                ready.append(prev)
            if t.terminated or t.truncated:
                ready.append(t)
            else:
                self._held[t.episode_id] = t
        if not ready:
            return
        if self.sac is None:
            self.sac = self._build(ready[0])
        self.steps.extend(ready)
        self.interventions.extend([t for t in ready if t.is_intervention])

    def _build(self, first: Transition) -> SACLearner:
        keys = self.cfg.state_keys or sorted(k for k, v in first.observation.items()
                                             if v.ndim == 1 and np.issubdtype(v.dtype, np.floating))
        dims = {k: int(np.asarray(first.observation[k]).size) for k in keys if k in first.observation}
        sac_cfg = dataclasses.replace(self.cfg.sac, state_keys=list(keys), residual_scale=self.cfg.scale,
                                      device=self.device)
        return SACLearner(sac_cfg, dims, int(first.action.shape[0]), seed=self.cfg.seed)

    # ---------------------------------------------------------------- training
    def train_allowed(self) -> int:
        """Updates allowed now: none during warm-up or after a failure, then bounded by the update-to-data ratio."""
        if self.failure is not None or self.sac is None or self.steps.total_added < max(1, self.cfg.warmup_steps):
            return 0
        budget = int(self.update_to_data * (self.steps.total_added - self.cfg.warmup_steps)) - self.updates
        return max(0, min(self.updates_per_cycle, budget))

    def update(self, n: int) -> dict[str, float]:
        """``n`` SAC updates (each ``sac.utd_ratio`` critic steps); a non-finite loss or weight sets :attr:`failure`."""
        assert self.sac is not None
        sac, cfg = self.sac, self.sac.config
        metrics: dict[str, float] = {}
        for _ in range(n):
            batches = [mixed_sample(self.steps, self.interventions, cfg.batch_size, cfg.demo_fraction, self.rng)
                       for _ in range(cfg.utd_ratio)]
            try:
                metrics = sac.update(batches)
            except SpecError as exc:  # a NaN/inf observation in the batch
                self.failure = f"update {self.updates + 1}: bad batch ({exc})"
                break
            self.updates += 1
            bad = [k for k, v in metrics.items() if not math.isfinite(v)]
            weights = [*sac.actor.parameters(), *sac.critic.parameters()]
            if bad or not all(bool(torch.isfinite(p).all()) for p in weights):
                self.failure = f"update {self.updates}: non-finite {', '.join(bad) or 'weights'}"
                break
        return {"loss": metrics.get("critic_loss", float("nan")), **metrics}

    # ---------------------------------------------------------------- outputs
    def can_publish(self) -> bool:
        """A version may go out: warm-up over, at least one update, and healthy."""
        return self.failure is None and self.sac is not None and self.updates > 0

    def publish(self, folder: Path, version: int) -> None:
        """Write the residual actor (not the critics) as a published version."""
        assert self.sac is not None
        sac = self.sac
        ResidualActorWeights.write(folder, sac.actor, sac.state_dims, sac.action_dim, sac.config.hidden, version,
                                   {"updates": self.updates, "config": config_to_dict(self.cfg)})

    def checkpoint(self) -> None:
        """Buffers first (append-only), then the networks and optimisers (atomic folder swap).

        A failed learner keeps its last good networks on disk.
        """
        self.steps.save(self.ckpt / "steps")
        self.interventions.save(self.ckpt / "interventions")
        if self.sac is not None and self.failure is None:
            self.sac.save(self.ckpt / "sac")
