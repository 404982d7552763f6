"""What the off-policy algorithms of the online runner share: reward, buffers, warm-up, health, checkpoints.

As stable-baselines3's ``common/`` holds the buffers and the training loop its algorithms share, this
module holds what ``rlpd``, ``residual`` and ``dsrl`` have in common, so each algorithm file only says
how it builds and updates its networks:

* :class:`OffPolicyConfig`: the fields every such ``learner.<algorithm>`` section has (reward, takeover
  penalty, credit, warm-up, seed);
* :class:`TaskReward`: the reward the actors store, sparse success by default (as on a real robot), and
  :func:`demo_transitions`: demonstrations rewarded the same way;
* :class:`OffPolicyAlgorithm`: the learner side. Every received step goes into the online buffer, the
  human's steps (and the demonstrations) also into the demo buffer that supplies RLPD's other half of
  each batch (Ball et al., "Efficient Online RL with Offline Data", arXiv:2302.02948). The policy step
  after which a human took over is penalised (RLIF / HIL-SERL's signal), or, with ``credit: habc``, a
  finished episode's outcome is credited only to what the policy executed (HABC, arXiv:2606.17043). No
  update before ``warmup_steps``; a non-finite loss, batch or weight stops training and publishing and
  says why, and the checkpoint keeps the last good networks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.store import EpisodeStore
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.credit import credited_rewards
from robot_rl.learners.task_success import observed_success

REWARDS = ("success", "env")
CREDITS = ("none", "habc")


@dataclass
class OffPolicyConfig:
    """Fields shared by the off-policy algorithms' sections (``learner.rlpd``, ``learner.residual``, ...)."""

    warmup_steps: int = 1000
    """Steps received before the first update; until then nothing new is published."""
    reward: str = "success"
    """Reward the actors store: ``success`` (1 on steps where the env reports ``is_success``, else 0) or
    ``env`` (the env's shaped reward; a named, explicit choice, since shaped terms can be gamed)."""
    end_on_success: bool = False
    """With ``reward: success``: the first successful step ends the episode (terminal, reward 1), as
    HIL-SERL's reward classifier does; the values then stay in [0, 1] and episodes get shorter. Leave it off
    for tasks whose success must be held (hovering)."""
    intervention_penalty: float = 0.0
    """Subtracted from the reward of the policy step after which a human took over (RLIF-style signal)."""
    credit: str = "none"
    """``none``: per-step rewards as stored. ``habc``: each finished episode is re-rewarded by
    robot_rl.learners.credit (+1 at the end of a successful policy segment, ``-intervention_penalty`` (or
    -1) before a takeover, 0 on human steps except a human-finished success); needs ``reward: success``."""
    explore: bool = True
    """Actors sample the actor's distribution (SAC's exploration); False: its mean (evaluation)."""
    seed: int = 0
    """Seed of the networks and the batch sampler."""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f"reward: must be one of {REWARDS}, got {self.reward!r}")
        if self.credit not in CREDITS:
            raise ValueError(f"credit: must be one of {CREDITS}, got {self.credit!r}")
        if (self.credit == "habc" or self.end_on_success) and self.reward != "success":
            raise ValueError("credit: habc and end_on_success act on the task's success: they need reward: success")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps: must be >= 0, got {self.warmup_steps}")
        if not math.isfinite(self.intervention_penalty) or self.intervention_penalty < 0:
            raise ValueError(f"intervention_penalty: must be finite and >= 0, got {self.intervention_penalty}")


class TaskReward(gym.Wrapper):
    """The reward the actors record: sparse success (default) or the env's own shaped reward."""

    def __init__(self, env: gym.Env[Any, Any], mode: str, end_on_success: bool = False) -> None:
        super().__init__(env)
        if mode not in REWARDS:
            raise ValueError(f"reward: must be one of {REWARDS}, got {mode!r}")
        if end_on_success and mode != "success":
            raise ValueError("end_on_success needs reward: success")
        self.mode, self.end_on_success = mode, end_on_success

    @classmethod
    def of(cls, env: gym.Env[Any, Any], cfg: OffPolicyConfig) -> TaskReward:
        """``env`` rewarded as the algorithm section ``cfg`` says."""
        return cls(env, cfg.reward, cfg.end_on_success)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The env's step with the reward replaced by ``float(info["is_success"])`` in ``success`` mode."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.mode == "success":
            reward = float(bool(info.get("is_success", False)))
            if self.end_on_success and reward > 0:
                terminated, truncated = True, False
        return obs, float(reward), bool(terminated), bool(truncated), info


def demo_transitions(store_path: str | Path, reward: str,
                     success_of: Callable[[Mapping[str, np.ndarray]], bool] | None,
                     episode_offset: int = 10**12, end_on_success: bool = False) -> list[Transition]:
    """Every step of the store's episodes, rewarded as the actors reward theirs, marked as demonstrations.

    ``reward: success`` needs ``success_of`` (an observation -> success function): a step's reward is 1
    when its next observation shows the task done (``end_on_success``: that step ends the demonstration,
    terminal, as it ends the actors' episodes). Episode ids are shifted by ``episode_offset`` so they
    never collide with the actors' ids.
    """
    if reward == "success" and success_of is None:
        raise ValueError("demonstrations with reward: success need the task's observed success")
    out: list[Transition] = []
    with EpisodeStore.open(store_path) as store:
        for index in range(store.num_episodes):
            for t in store.transitions(index):
                r = float(success_of(t.next_observation)) if reward == "success" and success_of else t.reward
                done = end_on_success and r > 0
                out.append(t.replace(reward=r, episode_id=episode_offset + t.episode_id, is_intervention=True,
                                     segment_source=SegmentSource.HUMAN, terminated=t.terminated or done,
                                     truncated=t.truncated and not done))
                if done:
                    break
    return out


class OffPolicyAlgorithm:
    """The learner side shared by the off-policy algorithms (see the module docstring).

    Subclasses build their networks on the first stored steps (:meth:`build`), run one update
    (:meth:`learn`), list their parameters for the health check (:meth:`parameters`), and save their
    networks (:meth:`save_networks`). ``checkpoint`` holds ``steps/``, ``interventions/`` and the
    subclass's own folder.
    """

    def __init__(self, cfg: OffPolicyConfig, checkpoint: str | Path, capacity: int, update_to_data: float,
                 updates_per_cycle: int, device: str = "auto") -> None:
        self.base_cfg, self.ckpt = cfg, Path(checkpoint)
        self.update_to_data, self.updates_per_cycle, self.device = update_to_data, updates_per_cycle, device
        self.capacity = capacity
        self.steps = ReplayBuffer(capacity)
        """Every received step (RLPD's online buffer)."""
        self.interventions = ReplayBuffer(capacity)
        """The human-controlled steps and demonstrations (RLPD's demo half of each batch)."""
        self.updates = 0
        self.failure: str | None = None
        """Why training stopped (non-finite loss, batch or weights); None while healthy."""
        self.resumed_from: dict[str, int] | None = None
        self.demos = 0
        """Demonstration steps loaded into the demo buffer."""
        self.human_steps = 0
        """Human-controlled steps received from the actors (the demo buffer also holds the demonstrations)."""
        self._held: dict[int, list[Transition]] = {}

    def counters(self) -> dict[str, int]:
        """Steps and human steps received so far."""
        return {"steps": self.steps.total_added, "human_steps": self.human_steps}

    def resume_buffers(self) -> None:
        """Reload both buffers from ``checkpoint`` (a subclass calls this when its networks were found)."""
        self.steps = ReplayBuffer.load(self.ckpt / "steps", capacity=self.capacity)
        self.interventions = ReplayBuffer.load(self.ckpt / "interventions", capacity=self.capacity)
        # counted from the stored steps (exact until the online buffer wraps around, a lower bound after)
        self.human_steps = int(self.steps.columns["is_intervention"][: len(self.steps)].sum()) if len(self.steps) else 0
        self.resumed_from = self.counters() | {"updates": self.updates}

    # ---------------------------------------------------------------- data
    def load_demonstrations(self, store: str | Path, env_id: str) -> None:
        """The episode store's steps, rewarded as ``env_id``'s actors reward theirs, into the demo buffer.

        Skipped for a resumed learner: its saved demo buffer holds them already.
        """
        if self.resumed_from is not None:
            return
        cfg = self.base_cfg
        success = observed_success(env_id) if cfg.reward == "success" else None
        self.add_demonstrations(demo_transitions(store, cfg.reward, success, end_on_success=cfg.end_on_success))

    def add_demonstrations(self, demos: Sequence[Transition]) -> None:
        """Demonstration steps into the demo buffer (the networks are built from the first if need be)."""
        if not demos:
            return
        if not self.is_built():
            self.build(demos[0])
        self.interventions.extend(demos)
        self.demos += len(demos)

    def add(self, transitions: Sequence[Transition]) -> None:
        """Route steps into the buffers once their reward is final (see the module docstring).

        Per-step rewards: each episode's newest step is held until the next arrives, so that the policy step
        after which a human took over can carry ``intervention_penalty``. ``credit: habc``: an episode's
        steps are held until its last one.
        """
        ready: list[Transition] = []
        for t in transitions:
            held = self._held.setdefault(t.episode_id, [])
            held.append(t)
            if t.terminated or t.truncated:
                ready.extend(self._finish(self._held.pop(t.episode_id)))
            elif self.base_cfg.credit == "none" and len(held) == 2:
                ready.append(self._penalise(held[0], held[1]))
                del held[0]
        if ready:
            self.store(ready)

    def held(self) -> list[Transition]:
        """Received steps waiting for their final reward (the checkpoint keeps them; re-added on resume)."""
        return [t for episode in self._held.values() for t in episode]

    def _penalise(self, prev: Transition, nxt: Transition) -> Transition:
        if nxt.is_intervention and not prev.is_intervention and self.base_cfg.intervention_penalty:
            return prev.replace(reward=prev.reward - self.base_cfg.intervention_penalty)
        return prev

    def _finish(self, episode: list[Transition]) -> list[Transition]:
        if self.base_cfg.credit == "habc":
            success = any(t.reward > 0 for t in episode)
            return credited_rewards(episode, success, self.base_cfg.intervention_penalty or 1.0)
        return [self._penalise(a, b) for a, b in itertools.pairwise(episode)] + [episode[-1]]

    def store(self, ready: Sequence[Transition]) -> None:
        """Steps with final rewards: all into the online buffer, the human's also into the demo buffer."""
        if not self.is_built():
            self.build(ready[0])
        self.steps.extend(ready)
        human = [t for t in ready if t.is_intervention]
        self.interventions.extend(human)
        self.human_steps += len(human)

    # ---------------------------------------------------------------- training
    def updates_owed(self) -> int:
        """None during warm-up or after a failure, then what the update-to-data ratio allows beyond those done."""
        warmup = self.base_cfg.warmup_steps
        if self.failure is not None or not self.is_built() or self.steps.total_added < max(1, warmup):
            return 0
        return max(0, int(self.update_to_data * (self.steps.total_added - warmup)) - self.updates)

    def train_allowed(self) -> int:
        """Updates allowed now: :meth:`updates_owed`, at most ``updates_per_cycle``."""
        return min(self.updates_per_cycle, self.updates_owed())

    def update(self, n: int) -> dict[str, float]:
        """``n`` updates; a bad batch or a non-finite loss or weight sets :attr:`failure` and stops."""
        metrics: dict[str, float] = {}
        for _ in range(n):
            try:
                metrics = self.learn()
            except SpecError as exc:  # a NaN/inf observation in the batch
                self.failure = f"update {self.updates + 1}: bad batch ({exc})"
                break
            self.updates += 1
            bad = [k for k, v in metrics.items() if not math.isfinite(v)]
            if bad or not all(bool(torch.isfinite(p).all()) for p in self.parameters()):
                self.failure = f"update {self.updates}: non-finite {', '.join(bad) or 'weights'}"
                break
        return {"loss": metrics.get("critic_loss", float("nan")), **metrics}

    def can_publish(self) -> bool:
        """A version may go out: at least one update, and healthy."""
        return self.failure is None and self.is_built() and self.updates > 0

    def checkpoint(self) -> None:
        """Buffers first (append-only), then the networks (atomic folder swap).

        A failed learner keeps its last good networks on disk.
        """
        self.steps.save(self.ckpt / "steps")
        self.interventions.save(self.ckpt / "interventions")
        if self.is_built() and self.failure is None:
            self.save_networks()

    # ---------------------------------------------------------------- what a subclass provides
    def is_built(self) -> bool:
        """Whether the networks exist (they are built from the first stored steps)."""
        raise NotImplementedError

    def build(self, first: Transition) -> None:
        """Build the networks from the shapes of ``first``."""
        raise NotImplementedError

    def learn(self) -> dict[str, float]:
        """One update; metrics with ``critic_loss``."""
        raise NotImplementedError

    def parameters(self) -> list[torch.Tensor]:
        """Every trained tensor (checked for non-finite values after each update)."""
        raise NotImplementedError

    def save_networks(self) -> None:
        """Networks and optimisers into ``checkpoint`` (atomically)."""
        raise NotImplementedError
