"""HG-DAgger / RaC-style learner: behaviour cloning on human-gated segments plus the demonstrations.

Only steps a human controlled are labels (HG-DAgger discards autonomous segments; RaC imitates the
recovery + correction segments, not the policy-executed prefix). Segments are windowed like episodes
(observation history and action chunks never cross a segment boundary), and each batch mixes demos and
interventions at ``intervention_fraction`` so a few minutes of corrections are not drowned by hours of
demonstrations (SOP's up-weighting of online data). Works with any :class:`robot_rl.policies.base.Policy`.

Two details decide whether fine-tuning helps or hurts (measured on a camera pick-and-lift policy):
a segment the human hands back mid-motion has no labels past its end, so those chunk steps are left out of
the loss instead of padded with "hold still" (with 15-step takeovers and 16-step chunks, half of every
intervention target was padding); and the weights that go out are an exponential moving average, as the
behaviour cloning that made the policy exports (its raw weights scored 80% where the average scored 93%).
Intervention segments are kept in a :class:`~robot_rl.learners.buffers.ReplayBuffer`, so they are saved
and restored with the learner (no pickle).

With ``success_fraction`` the policy's own steps that HABC's credit rule rewards (a policy segment that ran
to the end of a successful episode, robot_rl.learners.credit) are labels too: fine-tuning on new corrections
alone forgets what made the starting policy good (its earlier corrections are not in this run's buffers),
and on the pick-and-lift stand-in that made the policy worse with every round of human help.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.device import resolve_device, to_device
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.algorithms.registry import OnlineAlgorithm, RunSettings, register
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.credit import assign_credit
from robot_rl.learners.open_episodes import OpenEpisodes
from robot_rl.learners.task_success import episode_succeeded, observed_success
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.training.checkpoint import load_training_state, save_training_state
from robot_rl.training.dataset import ChunkDataset
from robot_rl.training.labels import label_columns
from robot_rl.training.loop import Ema

_LOG = logging.getLogger(__name__)


@dataclass
class HGDAggerConfig:
    """HG-DAgger training settings."""

    batch_size: int = 64
    """Windows per gradient step."""
    lr: float = 1e-4
    """AdamW learning rate (fine-tuning: lower than from-scratch BC)."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    updates_per_round: int = 200
    """Gradient steps per :meth:`HGDAggerLearner.update` call."""
    intervention_fraction: float = 0.5
    """Share of each batch drawn from human segments once there are any (the rest from demos)."""
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    ema_decay: float = 0.995
    """Decay of the moving average of the weights that are published and saved (0: the raw weights). It starts
    at the loaded policy (already an average) with no warm-up."""
    start_fraction: float = 0.0
    """Share of the demonstrations' part of each batch drawn from their episode starts (the first ``start_steps``
    frames), as the behaviour cloning of a camera policy does (its ``start_fraction``): interventions happen
    mid-episode, so uniform batches thin out the starts, where only the cameras say where the object is."""
    start_steps: int = 10
    """Frames from an episode's start that ``start_fraction`` draws from."""
    success_fraction: float = 0.0
    """Share of each batch drawn from the policy's own credited steps (segments that ran to the end of a
    successful episode); 0: HG-DAgger proper (human steps and demos only)."""
    capacity: int = 200_000
    """Intervention steps kept (oldest dropped first); the policy's credited steps likewise."""
    seed: int = 0
    """Seed of the window sampler."""
    action_steps: int | None = None
    """Steps of each predicted chunk the fine-tuned policy executes before it predicts again (its executor's
    ``n_action_steps``, carried by every published version); None: as the policy came. On a robot slower than
    the simulator the policy trained in, re-planning every step lets it see its fingers close before it lifts
    (benchmarks/README.md, The arm on the "real" robot)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.updates_per_round < 1 or self.capacity < 1:
            raise ValueError("batch_size, updates_per_round and capacity must be >= 1")
        if not 0.0 <= self.start_fraction <= 1.0 or self.start_steps < 1:
            raise ValueError(f"start_fraction must be in [0, 1] and start_steps >= 1, got {self.start_fraction}, "
                             f"{self.start_steps}")
        if not 0.0 <= self.intervention_fraction <= 1.0:
            raise ValueError(f"intervention_fraction: must be in [0, 1], got {self.intervention_fraction}")
        if not 0.0 <= self.success_fraction <= 1.0 - self.intervention_fraction:
            raise ValueError(f"success_fraction: must be in [0, 1 - intervention_fraction], "
                             f"got {self.success_fraction}")
        if self.lr <= 0 or self.weight_decay < 0 or self.grad_clip <= 0:
            raise ValueError("lr and grad_clip must be > 0, weight_decay >= 0")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay: must be in [0, 1), got {self.ema_decay}")
        if self.action_steps is not None and self.action_steps < 1:
            raise ValueError(f"action_steps: must be >= 1 or null, got {self.action_steps}")


class HGDAggerLearner:
    """Aggregates human-gated segments and fine-tunes ``policy`` on them plus ``demos``.

    ``device`` ("auto", "cpu", "cuda" or a torch.device) moves the policy there before its optimizer is
    built; None trains it where it already is. Batches are gathered on the CPU and moved per step.
    """

    def __init__(self, policy: Policy, config: HGDAggerConfig | None = None,
                 demos: ChunkDataset | None = None, device: str | torch.device | None = None) -> None:
        self.policy, self.config, self.demos = policy, config or HGDAggerConfig(), demos
        if device is not None:
            policy.to(resolve_device(device) if isinstance(device, str) else device)
        self.keys = [*policy.state_keys, *policy.image_keys]
        self.interventions = ReplayBuffer(self.config.capacity)
        self.successes = ReplayBuffer(self.config.capacity)
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        self.rng = np.random.default_rng(self.config.seed)
        self.updates = 0
        self._datasets: dict[str, ChunkDataset | None] = {}
        if demos is not None and not bool(policy.normalizer.fitted):
            policy.set_stats(demos.stats())
        self.ema = Ema(policy, self.config.ema_decay, warmup=False) if self.config.ema_decay > 0 else None

    @property
    def published(self) -> Policy:
        """The weights that go out (to actors, to disk): the moving average, or the policy itself without one."""
        return self.policy if self.ema is None else self.ema.module

    @property
    def device(self) -> torch.device:
        """Where the policy trains (batches are moved there)."""
        return next(self.policy.parameters()).device

    @property
    def num_intervention_steps(self) -> int:
        """Human-controlled steps held."""
        return len(self.interventions)

    def add_rollout(self, transitions: Sequence[Transition]) -> int:
        """Keep the human-controlled steps of a rollout; returns how many were kept."""
        human = [t for t in transitions if t.segment_source is SegmentSource.HUMAN]
        self.check_steps(human)
        if human:
            self.interventions.extend(human)
            self._datasets.pop("interventions", None)
        return len(human)

    def add_successes(self, transitions: Sequence[Transition]) -> int:
        """Keep the policy's own credited steps (their executed actions become labels); returns how many."""
        self.check_steps(transitions)
        if transitions:
            self.successes.extend(list(transitions))
            self._datasets.pop("successes", None)
        return len(transitions)

    def check_steps(self, transitions: Sequence[Transition]) -> None:
        """Every step has the policy's observation keys and an action of its size (else nothing is kept)."""
        dim = self.policy.spec.action_dim
        for t in transitions:
            missing = [k for k in self.keys if k not in t.observation]
            if missing:
                raise SpecError(f"episode {t.episode_id} step {t.step}: observation: missing key(s) {missing} "
                                "the policy needs")
            if t.action.shape != (dim,):
                raise SpecError(f"episode {t.episode_id} step {t.step}: action of shape {t.action.shape}, the "
                                f"policy acts with ({dim},) (a {t.segment_source.name.lower()} step with no action?)")

    def intervention_dataset(self) -> ChunkDataset | None:
        """Human segments as a windowed dataset (one 'episode' per segment), or None when empty."""
        return self._segments("interventions", self.interventions)

    def success_dataset(self) -> ChunkDataset | None:
        """The policy's credited segments as a windowed dataset, or None when empty."""
        return self._segments("successes", self.successes)

    def _segments(self, name: str, buffer: ReplayBuffer) -> ChunkDataset | None:
        if len(buffer) == 0:
            return None
        if self._datasets.get(name) is None:
            n, cap = len(buffer), buffer.capacity
            order = (buffer.total_added - n + np.arange(n)) % cap
            rows = buffer.rows(order)
            ep, seg = rows["episode_id"], rows["segment_id"]
            cut = np.flatnonzero((ep[1:] != ep[:-1]) | (seg[1:] != seg[:-1])) + 1
            ends = np.r_[cut, n]
            handed_back = ~rows["terminated"][ends - 1].astype(bool)  # the robot went on: no labels after
            columns = {}
            for key in self.keys:
                value = rows[f"obs.{key}"]
                columns[key] = value if key in self.policy.image_keys else value.astype(np.float32).reshape(n, -1)
            labels = label_columns(self.policy.aux_keys, lambda k: rows.get(f"obs.{k}"), n)  # sim: pose known
            columns.update(labels)
            cfg = self.policy.config
            self._datasets[name] = ChunkDataset(columns, rows["action"].astype(np.float32), ends,
                                                [self.policy.task] * len(ends), self.policy.image_keys,
                                                cfg.n_obs_steps, cfg.horizon, aux_keys=list(labels),
                                                open_ends=handed_back)
        return self._datasets[name]

    def _batch(self) -> dict[str, Any]:
        cfg = self.config
        online = self.intervention_dataset()
        own = self.success_dataset() if cfg.success_fraction > 0 else None
        if online is None and self.demos is None and own is None:
            raise ValueError("HG-DAgger has no data: give demos or add rollouts with human segments")
        n_int = 0 if online is None else round(cfg.batch_size * cfg.intervention_fraction)
        n_own = 0 if own is None else round(cfg.batch_size * cfg.success_fraction)
        if self.demos is None:  # no demonstrations: their share goes to the human steps (or the own ones)
            n_int, n_own = (cfg.batch_size - n_own, n_own) if online is not None else (0, cfg.batch_size)
        parts = []
        if n_int and online is not None:
            parts.append(online.sample(n_int, self.rng))
        if n_own and own is not None:
            parts.append(own.sample(n_own, self.rng))
        if cfg.batch_size - n_int - n_own and self.demos is not None:
            parts.append(self.demos.sample(cfg.batch_size - n_int - n_own, self.rng, cfg.start_fraction,
                                           cfg.start_steps))
        if len(parts) == 1:
            return parts[0]
        keys = [k for k in parts[0]["obs"] if all(k in part["obs"] for part in parts)]  # aux labels: where all have
        batch = {"obs": {k: torch.cat([part["obs"][k] for part in parts]) for k in keys},
                 "action": torch.cat([part["action"] for part in parts]),
                 "task": [task for part in parts for task in part["task"]]}
        if any("action_is_pad" in part for part in parts):
            batch["action_is_pad"] = torch.cat([part.get("action_is_pad", torch.zeros(part["action"].shape[:2],
                                                                                      dtype=torch.bool))
                                                for part in parts])
        return batch

    def update(self, steps: int | None = None) -> dict[str, float]:
        """``steps`` (default ``updates_per_round``) gradient steps; returns the mean loss."""
        if not bool(self.policy.normalizer.fitted):
            data = self.intervention_dataset()
            if data is None:
                raise ValueError("HG-DAgger has no data to fit the policy's normaliser")
            self.policy.set_stats(data.stats())
        self.policy.train()
        losses, aux = [], []
        for _ in range(steps or self.config.updates_per_round):
            loss, metrics = self.policy.compute_loss(to_device(self._batch(), self.device))
            if "aux_loss" in metrics:
                aux.append(metrics["aux_loss"])
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.grad_clip)
            self.optimizer.step()
            if self.ema is not None:
                self.ema.update(self.policy)
            losses.append(float(loss.detach()))
            self.updates += 1
        self.policy.eval()
        out = {"loss": float(np.mean(losses)), "intervention_steps": float(len(self.interventions))}
        if aux:  # the auxiliary head trained on these batches (their labels were recorded)
            out["aux_loss"] = float(np.mean(aux))
        return out

    def save(self, folder: str | Path) -> Path:
        """The published policy under ``policy/``, the buffers under ``interventions/`` (and ``successes/``)."""
        folder = Path(folder)
        self.published.save(folder / "policy")
        self.save_buffers(folder)
        return folder

    def save_buffers(self, folder: Path) -> None:
        """The intervention buffer, and the credited steps when there are any."""
        self.interventions.save(folder / "interventions")
        if self.successes.total_added:
            self.successes.save(folder / "successes")

    def restore_interventions(self, folder: str | Path) -> None:
        """Load the buffers a previous :meth:`save` wrote (a restarted learner keeps its data)."""
        folder = Path(folder)
        self.interventions = ReplayBuffer.load(folder / "interventions", capacity=self.config.capacity)
        if (folder / "successes").exists():
            self.successes = ReplayBuffer.load(folder / "successes", capacity=self.config.capacity)
        self._datasets.clear()



MAX_OPEN_EPISODES = 64
"""Episodes whose end has not arrived yet that the credit keeps (per learner; oldest dropped first)."""
MARKER = "policy.json"
"""File that marks a complete published policy folder."""


class HGDAggerAlgorithm:
    """HG-DAgger in the online loop: fine-tunes the policy itself on human-gated segments plus demos."""

    marker = MARKER

    def __init__(self, cfg: RunSettings, checkpoint: Path) -> None:
        lc = cfg.learner
        self.lc, self.ckpt = lc, checkpoint
        torch.manual_seed(lc.hg_dagger.seed)
        state = self.ckpt / "state"
        policy = Policy.load(state if (state / "train_state.json").is_file() else cfg.policy)
        if lc.hg_dagger.action_steps is not None:
            policy.set_executor(replace(policy.config.executor, n_action_steps=lc.hg_dagger.action_steps))
        demos = None
        if lc.demos:
            pc = policy.config
            demos = ChunkDataset.from_store(lc.demos, pc.state_keys, pc.image_keys, pc.n_obs_steps, pc.horizon,
                                            aux_keys=pc.aux_keys)
        self.learner = HGDAggerLearner(policy, lc.hg_dagger, demos, device=lc.device)
        self.succeeded = observed_success(cfg.actor.env_id) if lc.hg_dagger.success_fraction > 0 else None
        self._episodes = OpenEpisodes(MAX_OPEN_EPISODES)
        self.steps = ReplayBuffer(lc.capacity)
        self.updates = 0
        self.failure: str | None = None
        self.refused: list[str] = []
        """Why episodes were refused (the episode and step named)."""
        self.resumed_from: dict[str, int] | None = None
        if (state / "train_state.json").is_file():
            meta = load_training_state(state, policy, self.learner.ema, self.learner.optimizer)
            self.updates = int(meta["step"])
            self.learner.restore_interventions(self.ckpt)
            self.steps = ReplayBuffer.load(self.ckpt / "steps", capacity=lc.capacity)
            self.resumed_from = {"updates": self.updates, "steps": self.steps.total_added,
                                 "human_steps": self.learner.interventions.total_added}

    @property
    def interventions(self) -> ReplayBuffer:
        """The human-controlled steps HG-DAgger trains on."""
        return self.learner.interventions

    @property
    def human_steps(self) -> int:
        """Human-controlled steps received (its demonstrations live apart, in a ChunkDataset)."""
        return self.learner.interventions.total_added

    def add(self, transitions: Sequence[Transition]) -> None:
        """Keep every step; HG-DAgger keeps the human ones (and, with ``success_fraction``, credited ones).

        An episode with a step the policy cannot learn from (a missing observation key, an action of another
        size) is refused whole, named in :attr:`refused`; the other episodes of the batch are kept.
        """
        episodes: dict[int, list[Transition]] = {}
        for t in transitions:
            episodes.setdefault(t.episode_id, []).append(t)
        bad = set()
        for episode, steps in episodes.items():
            try:
                self.learner.check_steps(steps)
            except SpecError as err:
                bad.add(episode)
                self.refused.append(str(err))
                _LOG.warning("HG-DAgger refused %s", err)
        good = [t for t in transitions if t.episode_id not in bad]
        if good:
            self.steps.extend(good)
            self.learner.add_rollout(good)
            if self.succeeded is not None:
                self._credit(good)

    def _credit(self, transitions: Sequence[Transition]) -> None:
        """Collect each episode's steps; at its end hand the policy steps credited +1 to the learner."""
        assert self.succeeded is not None
        for episode in self._episodes.add(transitions):
            success = episode_succeeded(self.succeeded, episode)
            credit = assign_credit(episode, success)
            self.learner.add_successes([s for s, c in zip(episode, credit.step_credit) if c > 0])

    def held(self) -> list[Transition]:
        """None: every step goes straight into the buffers."""
        return []

    def updates_owed(self) -> int:
        """0 until enough human data, then what the update-to-data ratio allows beyond the updates done."""
        lc = self.lc
        if self.learner.num_intervention_steps < max(1, lc.min_intervention_steps):
            return 0
        return max(0, int(lc.update_to_data * self.steps.total_added) - self.updates)

    def train_allowed(self) -> int:
        """:meth:`updates_owed`, at most ``updates_per_cycle``; 0 after a failure."""
        if self.failure is not None:
            return 0
        return min(self.lc.updates_per_cycle, self.updates_owed())

    def update(self, n: int) -> dict[str, float]:
        """``n`` behaviour-cloning steps.

        A non-finite loss or weight sets :attr:`failure`: nothing is published or checkpointed after it, so the
        last good version stays the newest.
        """
        metrics = self.learner.update(n)
        self.updates += n
        finite_loss = bool(np.isfinite(metrics["loss"]))
        if not finite_loss or not all(bool(torch.isfinite(p).all()) for p in self.learner.published.parameters()):
            self.failure = f"update {self.updates}: non-finite {'weights' if finite_loss else 'loss'}"
        return metrics

    def can_publish(self) -> bool:
        """From the start (the policy is usable), until a failure."""
        return self.failure is None

    def publish(self, folder: Path, version: int) -> None:
        """The published policy (the weights' moving average), stamped with ``version``."""
        published = self.learner.published
        published.version = version
        published.save(folder)

    def checkpoint(self) -> None:
        """Buffers first (append-only), then the state that names their counts (atomic swap).

        After a failure the buffers only (steps received since are not lost): the last good networks stay.
        """
        self.steps.save(self.ckpt / "steps")
        self.learner.save_buffers(self.ckpt)
        if self.failure is None:
            counts = {"steps": self.steps.total_added, "human_steps": self.learner.interventions.total_added}
            save_training_state(self.ckpt / "state", self.learner.policy, self.learner.ema, self.learner.optimizer,
                                self.updates, counts)


def latest_policy(weights: Path, timeout: float = 120.0) -> tuple[Policy, int]:
    """The newest published policy of ``weights`` (waits up to ``timeout`` for a first one) and its version."""
    from robot_rl.runtime.weights import list_versions

    deadline = time.monotonic() + timeout
    while True:
        versions = list_versions(weights)
        if versions:
            version, folder = versions[-1]
            try:
                return Policy.load(folder), version
            except (CheckpointError, FileNotFoundError):  # pruned between listing and loading
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{weights}: no published weights within {timeout:.0f} s")
        time.sleep(0.1)


def _agent(cfg: RunSettings, env: Any, run: Path) -> tuple[Any, Any, Any]:
    """A PolicyRunner over the newest published policy (new versions swap in between chunks)."""
    from robot_rl.runtime.policy_runner import PolicyRunner

    policy, _ = latest_policy(run / "weights")
    return env, PolicyRunner(policy, weights_dir=run / "weights", device=cfg.actor.device), None


def _evaluation_agent(cfg: RunSettings, folder: Path, env: Any) -> Any:
    return Policy.load(folder)


ALGORITHM = register(OnlineAlgorithm(
    name="hg_dagger", config=HGDAggerConfig, make_learner=HGDAggerAlgorithm, make_agent=_agent,
    evaluation_agent=_evaluation_agent, marker=MARKER, streams=True, module=__name__))
"""``learner.algorithm: hg_dagger``: the policy itself fine-tuned; a graph actor's runner swaps its versions in."""
