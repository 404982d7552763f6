"""SAC (RLPD recipe) in the online runner: the learner side, the published actor and the actors' agent.

``rlpd`` (a Gaussian MLP actor alone) and ``residual`` (a bounded correction on a frozen base) train the
same networks (:mod:`robot_rl.learners.sac_rlpd`); they differ in the actor's ``residual_scale`` and in
what fills the demo buffer. This module is what they share:

* :class:`SACAlgorithm`: an :class:`~robot_rl.learners.off_policy.OffPolicyAlgorithm` over a
  :class:`~robot_rl.learners.sac_rlpd.SACLearner` built from the first stored steps (the learner never
  needs the base policy), RLPD batches (half online, half demo buffer), checkpoint in ``sac/``;
* :class:`ActorWeights`: a published actor (``actor.safetensors`` + ``actor.json``, the marker, last);
* :class:`SACAgent`: what an actor runs: the base's action (if any) plus the newest published actor,
  swapped between steps. Before any version exists it executes the base exactly (residual warm-up) or,
  without a base, uniform random actions (SAC's usual start).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robot_rl.core.config import config_to_dict
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.buffers import mixed_sample
from robot_rl.learners.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from robot_rl.learners.sac_rlpd import GaussianActor, SACLearner, SACLearnerConfig, state_array
from robot_rl.runtime.episode import act as agent_action
from robot_rl.runtime.episode import reset_agent
from robot_rl.runtime.weights import WeightsFollower

MARKER = "actor.json"
"""The file that marks a complete published ``weights/v<N>/`` actor folder (a PolicyRunner's is policy.json)."""
FORMAT = "robot_rl.sac_actor"


# ------------------------------------------------------------------------------------------ published actor
class ActorWeights:
    """A published SAC actor: the network, its input keys and its version."""

    def __init__(self, actor: GaussianActor, state_dims: dict[str, int], action_dim: int, version: int) -> None:
        self.actor, self.state_dims, self.action_dim, self.version = actor, state_dims, action_dim, version

    @property
    def is_residual(self) -> bool:
        """Whether the actor corrects a base action (it then needs one)."""
        return self.actor.residual_scale > 0

    @staticmethod
    def write(folder: Path, actor: GaussianActor, state_dims: Mapping[str, int], action_dim: int, hidden: int,
              version: int, extra: Mapping[str, Any]) -> None:
        """``actor.safetensors`` + ``actor.json`` (the marker, written last) into ``folder``."""
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in actor.state_dict().items()},
                  str(folder / "actor.safetensors"))
        meta = {"format": FORMAT, "version": version, "state_dims": dict(state_dims), "action_dim": action_dim,
                "hidden": hidden, "scale": actor.residual_scale, **extra}
        (folder / MARKER).write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> ActorWeights:
        """Read a published folder; raises SpecError / OSError for a broken one."""
        folder = Path(folder)
        meta = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise SpecError(f"{folder}: not a SAC actor ({MARKER} format {meta.get('format')!r})")
        dims = {str(k): int(v) for k, v in meta["state_dims"].items()}
        with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten: leave torch's RNG alone
            actor = GaussianActor(sum(dims.values()), int(meta["action_dim"]), int(meta["hidden"]),
                                  float(meta["scale"]))
        actor.load_state_dict(load_file(str(folder / "actor.safetensors")), strict=True)
        if not all(bool(torch.isfinite(p).all()) for p in actor.parameters()):
            raise SpecError(f"{folder}: non-finite weights")
        return cls(actor.eval(), dims, int(meta["action_dim"]), int(meta["version"]))


# ------------------------------------------------------------------------------------------ actor side
class BaseActionView:
    """The ``base_agent`` of :func:`robot_rl.runtime.episode.run_episode`: the base action of this step.

    It is the action the :class:`SACAgent` computed (asking a chunked base twice would advance it twice).
    """

    def __init__(self, agent: SACAgent) -> None:
        self.agent = agent

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The base action of the step just proposed."""
        if self.agent.last_base is None:
            raise RuntimeError("base_action asked before the agent acted")
        return self.agent.last_base


class SACAgent:
    """``act(obs)``: the base's action (if any) plus the newest published SAC actor.

    New versions in ``weights_dir`` are looked for before every step and swapped in between steps; a broken
    one is refused (kept in :attr:`refused` with the reason) and the running version keeps acting.
    """

    def __init__(self, base: Any | None = None, weights_dir: str | Path | None = None, deterministic: bool = False,
                 actor: ActorWeights | None = None, action_dim: int | None = None, seed: int = 0,
                 accept: Callable[[ActorWeights], str | None] | None = None) -> None:
        if base is None and action_dim is None:
            raise ValueError("SACAgent: without a base, give action_dim (random actions before the first version)")
        self.base, self.deterministic, self.actor = base, deterministic, actor
        self.action_dim = action_dim
        self.follower = None if weights_dir is None else WeightsFollower(weights_dir, MARKER, self._load)
        self.last_base: np.ndarray | None = None
        self.base_view = BaseActionView(self)
        """Pass as ``run_episode(..., base_agent=agent.base_view)`` when there is a base."""
        self.generator = torch.Generator().manual_seed(seed)
        self.accept = accept
        """Extra check of a newly published actor before it acts: why it cannot (refused), or None."""

    @property
    def version(self) -> int:
        """The actor version acting now (0: none yet)."""
        return 0 if self.actor is None else self.actor.version

    def reset(self, seed: int | None = None) -> None:
        """New episode: reset the base; ``seed`` fixes the exploration noise."""
        if self.base is not None:
            reset_agent(self.base, seed)
        if seed is not None:
            self.generator.manual_seed(int(seed))

    @property
    def refused(self) -> dict[int, str]:
        """Published versions that could not be loaded, with the reason."""
        return {} if self.follower is None else self.follower.refused

    def _load(self, folder: Path) -> ActorWeights:
        weights = ActorWeights.load(folder)
        if weights.is_residual != (self.base is not None):
            raise SpecError(f"{folder}: a {'residual' if weights.is_residual else 'plain'} actor for an agent "
                            f"{'with' if self.base is not None else 'without'} a base")
        if self.accept is not None and (problem := self.accept(weights)) is not None:
            raise SpecError(problem)
        return weights

    def poll_weights(self) -> None:
        """Swap in the newest published actor, if any (a broken or mismatched one is refused)."""
        weights = None if self.follower is None else self.follower.poll()
        if weights is not None:
            self.actor = weights

    @torch.no_grad()
    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Base action + correction (residual), or the actor's action (plain); see the class docstring."""
        self.poll_weights()
        base = None if self.base is None else agent_action(self.base, obs)
        self.last_base = base
        if self.actor is None:
            if base is not None:
                return base.copy()  # warm-up: exactly the base action
            dim = int(self.action_dim)  # type: ignore[arg-type]
            return (torch.rand(dim, generator=self.generator) * 2 - 1).numpy()
        state = torch.from_numpy(state_array(dict(obs), self.actor.state_dims))
        base_t = None if base is None else torch.from_numpy(np.asarray(base, np.float32))[None]
        action, _ = self.actor.actor(state, base_t, self.deterministic, self.generator)
        return action[0].numpy()

    __call__ = act


# ------------------------------------------------------------------------------------------ learner side
class SACAlgorithm(OffPolicyAlgorithm):
    """SAC on RLPD batches in the online learner; ``residual_scale`` > 0 makes the actor residual on a base.

    ``sac`` is built from the first stored steps (state keys: ``state_keys`` or every 1-D float key).
    """

    marker = MARKER

    def __init__(self, cfg: OffPolicyConfig, sac_cfg: SACLearnerConfig, state_keys: list[str], residual_scale: float,
                 checkpoint: str | Path, capacity: int, update_to_data: float, updates_per_cycle: int,
                 device: str = "auto") -> None:
        super().__init__(cfg, checkpoint, capacity, update_to_data, updates_per_cycle, device)
        self.sac_cfg, self.state_keys, self.residual_scale = sac_cfg, list(state_keys), residual_scale
        self.sac: SACLearner | None = None
        self.rng = np.random.default_rng(cfg.seed)
        if (self.ckpt / "sac" / "learner.json").is_file():
            self.sac = SACLearner.load(self.ckpt / "sac", device=device)
            self.updates = self.sac.updates
            self.resume_buffers()

    def is_built(self) -> bool:
        """The networks exist."""
        return self.sac is not None

    def build(self, first: Transition) -> None:
        """Actor and critics sized by ``first``'s state keys and action."""
        keys = self.state_keys or sorted(k for k, v in first.observation.items()
                                         if v.ndim == 1 and np.issubdtype(v.dtype, np.floating))
        missing = [k for k in keys if k not in first.observation]
        if missing:
            raise SpecError(f"state_keys: {missing} not in the observation {sorted(first.observation)}")
        dims = {k: int(np.asarray(first.observation[k]).size) for k in keys}
        sac_cfg = dataclasses.replace(self.sac_cfg, state_keys=list(keys), residual_scale=self.residual_scale,
                                      device=self.device)
        self.sac = SACLearner(sac_cfg, dims, int(first.action.shape[0]), seed=self.base_cfg.seed)

    def learn(self) -> dict[str, float]:
        """One SAC update: ``utd_ratio`` critic steps on RLPD batches, then the actor and temperature."""
        assert self.sac is not None
        cfg = self.sac.config
        batches = [mixed_sample(self.steps, self.interventions, cfg.batch_size, cfg.demo_fraction, self.rng)
                   for _ in range(cfg.utd_ratio)]
        return self.sac.update(batches)

    def parameters(self) -> list[torch.Tensor]:
        """Actor and critic weights."""
        assert self.sac is not None
        return [*self.sac.actor.parameters(), *self.sac.critic.parameters()]

    def publish(self, folder: Path, version: int) -> None:
        """Write the actor (not the critics) as a published version."""
        assert self.sac is not None
        sac = self.sac
        ActorWeights.write(folder, sac.actor, sac.state_dims, sac.action_dim, sac.config.hidden, version,
                           {"updates": self.updates, "config": config_to_dict(self.base_cfg)})

    def save_networks(self) -> None:
        """Networks, optimisers and counters into ``sac/`` (atomic folder swap)."""
        assert self.sac is not None
        self.sac.save(self.ckpt / "sac")
