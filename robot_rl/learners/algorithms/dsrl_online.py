"""DSRL in the online runner: the actors sample the frozen policy from noise a SAC actor chooses.

Wagenmaker et al., "Steering Your Diffusion Policy with Latent Space Reinforcement Learning"
(arXiv:2506.15799), noise-aliased variant (DSRL-NA, :mod:`robot_rl.learners.dsrl`). The pieces:

* :class:`DSRLAlgorithm` (learner side): an :class:`~robot_rl.learners.off_policy.OffPolicyAlgorithm`
  (buffers, reward, takeover penalty / HABC credit, warm-up, health checks) over a
  :class:`~robot_rl.learners.dsrl.DSRLLearner`. The actors stream ordinary per-step transitions; a
  decision (history, the next ``action_steps`` EXECUTED actions, their summed reward, the history after
  them) is gathered from the buffers when a batch is drawn, wherever the actors' episodes interleave.
  The action critic only needs what was executed, so human steps and demonstrations teach it, and the
  noise that produced a chunk never has to reach the learner (the noise critic is distilled on noises
  the learner draws itself). Half of each batch starts in the human/demo buffer (RLPD's symmetric
  sampling); checkpoint in ``dsrl/`` (atomic folder swap), resumed with both buffers.
* :class:`NoiseActorWeights`: a published noise actor (``noise_actor.safetensors`` + ``noise_actor.json``,
  the marker, written last), stamped with the fingerprint of the base it was trained on.
* :class:`DSRLAgent` (actor side): a :class:`~robot_rl.runtime.policy_runner.PolicyRunner` over the frozen
  base whose ``noise_source`` asks the newest noise actor for each chunk's starting noise. Versions swap in
  between chunks; broken ones or ones for another base are refused. Before the first version (warm-up) the
  source returns None and the base samples its own Gaussian noise, exactly as it would alone. Each chunk
  executes its first ``action_steps`` actions unblended (executor mode ``latest``), so what the action
  critic scores is what the chosen noise produced.

The base's weights are never trained: the learner freezes them and checks their fingerprint before each
publish (a changed base stops training, like a non-finite loss).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from robot_rl.core.config import config_to_dict
from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.algorithms.registry import OnlineAlgorithm, RunSettings, register
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.dsrl import META_FILE, DSRLConfig, DSRLLearner, policy_fingerprint
from robot_rl.learners.off_policy import OffPolicyAlgorithm, OffPolicyConfig, TaskReward
from robot_rl.learners.sac_rlpd import GaussianActor
from robot_rl.policies.base import Policy
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.runtime.weights import WeightsFollower

MARKER = "noise_actor.json"
"""The file that marks a complete published ``weights/v<N>/`` noise actor."""
WEIGHTS = "noise_actor.safetensors"
FORMAT = "robot_rl.dsrl_noise_actor"
STEP_SPAN = 1 << 20
"""(episode_id, step) -> one int key: episode_id * STEP_SPAN + step (episodes are far shorter)."""


@dataclass
class DSRLRunConfig(OffPolicyConfig):
    """DSRL-NA (``learner.algorithm: dsrl``); reward, warm-up etc. as OffPolicyConfig."""

    latent: DSRLConfig = field(default_factory=DSRLConfig)
    """Noise actor, action and noise critics (robot_rl.learners.dsrl); its ``device`` is ``learner.device``."""
    batch_size: int = 128
    """Decisions per update (each update also decodes 3x this many chunks through the base)."""
    demo_fraction: float = 0.5
    """Share of each batch whose decisions start at a human step or demonstration (RLPD's 50/50)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1 or not 0.0 <= self.demo_fraction <= 1.0:
            raise ValueError("batch_size must be >= 1 and demo_fraction in [0, 1]")


def steered_executor(policy: Policy, action_steps: int | None) -> ExecutorConfig:
    """Executor of a steered base: each chunk's first ``action_steps`` actions run as predicted (no blending)."""
    steps = action_steps if action_steps is not None else policy.config.executor.n_action_steps
    return ExecutorConfig(mode="latest", n_action_steps=int(steps))


# ------------------------------------------------------------------------------------------ published noise actor
class NoiseActorWeights:
    """A published noise actor: network, the state keys it reads, the chunk shape and the base it steers."""

    def __init__(self, actor: GaussianActor | None, meta: dict[str, Any]) -> None:
        self.actor, self.meta = actor, meta
        """None: a published *base* version (the base samples its own noise, as before the first version)."""
        self.state_dims: dict[str, int] = {str(k): int(v) for k, v in meta["state_dims"].items()}
        self.version = int(meta["version"])
        self.noise_scale = float(meta["noise_scale"])
        self.shape = (int(meta["horizon"]), int(meta["action_dim"]))

    @staticmethod
    def write(folder: Path, learner: DSRLLearner, version: int, extra: dict[str, Any],
              base_only: bool = False) -> None:
        """``noise_actor.safetensors`` + ``noise_actor.json`` (the marker, written last) into ``folder``.

        ``base_only``: no network, only the marker (``"base_only": true``): actors go back to the base's own
        noise, what the run started with (the deployment gate's way back to the start).
        """
        if base_only:
            extra = {**extra, "base_only": True}
        else:
            save_file({k: v.detach().cpu().contiguous().clone() for k, v in learner.actor.state_dict().items()},
                      str(folder / WEIGHTS))
        meta = {"format": FORMAT, "version": version, "state_dims": learner.state_dims,
                "n_obs_steps": learner.n_obs_steps, "horizon": learner.horizon, "action_dim": learner.action_dim,
                "action_steps": learner.action_steps, "hidden": learner.config.hidden,
                "noise_scale": learner.config.noise_scale, "num_steps": learner.config.num_steps,
                "base": {"type": learner.policy.name, "fingerprint": learner.fingerprint}, **extra}
        (folder / MARKER).write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> NoiseActorWeights:
        """Read a published folder; raises SpecError / OSError / SafetensorError for a broken one."""
        folder = Path(folder)
        meta = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SpecError(f"{folder}: not a DSRL noise actor")
        if meta.get("base_only") is True:
            return cls(None, meta)
        obs_dim = int(meta["n_obs_steps"]) * sum(int(v) for v in meta["state_dims"].values())
        with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten: leave torch's RNG alone
            actor = GaussianActor(obs_dim, int(meta["horizon"]) * int(meta["action_dim"]), int(meta["hidden"]), 0.0)
        actor.load_state_dict(load_file(str(folder / WEIGHTS)), strict=True)
        if not all(bool(torch.isfinite(p).all()) for p in actor.parameters()):
            raise SpecError(f"{folder}: non-finite weights")
        return cls(actor.eval(), meta)

    def check_base(self, policy: Policy, fingerprint: str, action_steps: int, num_steps: int | None) -> None:
        """Refuse an actor trained for another base, chunk shape, chunk execution or sampler step count."""
        pc = policy.config
        want = {"fingerprint": fingerprint, "n_obs_steps": pc.n_obs_steps, "horizon": pc.horizon,
                "action_dim": policy.spec.action_dim, "action_steps": action_steps, "num_steps": num_steps}
        have = {**{k: self.meta.get(k) for k in want}, "fingerprint": self.meta.get("base", {}).get("fingerprint")}
        if have != want:
            bad = {k: (have[k], want[k]) for k in want if have[k] != want[k]}
            raise SpecError(f"noise actor v{self.version}: does not fit this base ((published, here): {bad})")
        wrong = {k: d for k, d in self.state_dims.items() if policy.spec.state_dims.get(k) != d}
        if wrong:
            raise SpecError(f"noise actor v{self.version}: state keys {wrong} differ from the base's")

    @torch.no_grad()
    def noise(self, policy: Policy, history: Mapping[str, np.ndarray], deterministic: bool,
              generator: torch.Generator | None) -> np.ndarray | None:
        """The (H, A) starting noise for one observation history {key: (To, ...)} (None: the base's own)."""
        if self.actor is None:
            return None
        device = policy.device
        parts = [policy.normalizer.normalize(k, torch.from_numpy(np.asarray(history[k], np.float32))[None].to(device))
                 .flatten(1) for k in self.state_dims]
        squashed, _ = self.actor.to(device)(torch.cat(parts, -1), None, deterministic, generator)
        return (self.noise_scale * squashed.reshape(self.shape)).float().cpu().numpy()


# ------------------------------------------------------------------------------------------ actor side
class DSRLAgent:
    """``act(obs)``: the frozen base, each chunk sampled from the newest noise actor's noise (none: its own)."""

    def __init__(self, policy: Policy, weights_dir: str | Path | None = None, deterministic: bool = False,
                 action_steps: int | None = None, num_steps: int | None = None, seed: int = 0,
                 device: str | None = None, noise_actor: NoiseActorWeights | None = None) -> None:
        self.fingerprint = policy_fingerprint(policy)
        policy.set_executor(steered_executor(policy, action_steps))
        policy.requires_grad_(False)
        self.action_steps, self.num_steps = policy.config.executor.n_action_steps, num_steps
        self.runner = PolicyRunner(policy, num_steps=num_steps, device=device, noise_source=self._noise)
        self.deterministic = deterministic
        self.follower = None if weights_dir is None else WeightsFollower(weights_dir, MARKER, self._load)
        self.generator = torch.Generator().manual_seed(seed)
        self.noise_actor: NoiseActorWeights | None = None
        self.last_noise: np.ndarray | None = None
        """Starting noise of the newest chunk (None: the base drew its own)."""
        if noise_actor is not None:
            noise_actor.check_base(policy, self.fingerprint, self.action_steps, num_steps)
            self.noise_actor = noise_actor

    @property
    def policy(self) -> Policy:
        """The frozen base."""
        return self.runner.policy

    @property
    def version(self) -> int:
        """The noise-actor version acting now (0: none yet, the base samples its own noise)."""
        return 0 if self.noise_actor is None else self.noise_actor.version

    def reset(self, seed: int | None = None) -> None:
        """New episode; ``seed`` fixes the base's own noise (warm-up) and the noise actor's exploration."""
        self.runner.reset(seed)
        if seed is not None:
            self.generator.manual_seed(int(seed))

    @property
    def refused(self) -> dict[int, str]:
        """Published versions that could not be loaded or do not fit this base, with the reason."""
        return {} if self.follower is None else self.follower.refused

    def _load(self, folder: Path) -> NoiseActorWeights:
        weights = NoiseActorWeights.load(folder)
        weights.check_base(self.policy, self.fingerprint, self.action_steps, self.num_steps)
        return weights

    def poll_weights(self) -> None:
        """Swap in the newest published noise actor, if any (a broken or mismatched one is refused)."""
        weights = None if self.follower is None else self.follower.poll()
        if weights is not None:
            self.noise_actor = weights

    def _noise(self, history: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The runner's noise source, asked once per chunk: new versions swap in here, between chunks."""
        self.poll_weights()
        actor = self.noise_actor
        self.last_noise = None if actor is None else actor.noise(self.policy, history, self.deterministic,
                                                                 self.generator)
        return self.last_noise

    def act(self, obs: Any) -> np.ndarray:
        """This step's action (a new chunk, and maybe a new noise actor, every ``action_steps`` steps)."""
        return self.runner.act(obs)

    __call__ = act


# ------------------------------------------------------------------------------------------ learner side
class StepIndex:
    """(episode_id, step) -> storage position in a ReplayBuffer, so a decision's steps are found by episode."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer, self.indexed = buffer, 0
        self.rows: dict[int, int] = {}

    def refresh(self) -> None:
        """Index the rows added since the last call (and forget rows that left the ring, now and then)."""
        buf = self.buffer
        first = buf.total_added - len(buf)
        start = max(self.indexed, first)
        if start < buf.total_added:
            g = np.arange(start, buf.total_added)
            pos = g % buf.capacity
            keys = buf.columns["episode_id"][pos] * STEP_SPAN + buf.columns["step"][pos]
            self.rows.update(zip(keys.tolist(), g.tolist(), strict=True))
        self.indexed = buf.total_added
        if len(self.rows) > 2 * buf.capacity:
            self.rows = {k: v for k, v in self.rows.items() if v >= first}

    def find(self, episode: int, step: int) -> int | None:
        """Storage position of that step, or None (never stored, or overwritten)."""
        g = self.rows.get(episode * STEP_SPAN + step)
        buf = self.buffer
        return None if g is None or g < buf.total_added - len(buf) else g % buf.capacity


class DSRLAlgorithm(OffPolicyAlgorithm):
    """DSRL-NA on decisions gathered from the step buffers (see the module docstring)."""

    marker = MARKER

    def __init__(self, cfg: DSRLRunConfig, policy: Policy, checkpoint: str | Path, capacity: int,
                 update_to_data: float, updates_per_cycle: int, device: str = "auto") -> None:
        super().__init__(cfg, checkpoint, capacity, update_to_data, updates_per_cycle, device)
        self.cfg, self.rng = cfg, np.random.default_rng(cfg.seed)
        folder = self.ckpt / "dsrl"
        if not (folder / META_FILE).is_file() and (old := folder.with_name(".dsrl.old")).is_dir():
            folder = old  # killed between the two renames of a checkpoint swap
        if (folder / META_FILE).is_file():
            self.dsrl = DSRLLearner.load(folder, policy, device=device)
            self.updates = self.dsrl.updates
            self.resume_buffers()
        else:
            self.dsrl = DSRLLearner(dataclasses.replace(cfg.latent, device=device), policy, seed=cfg.seed)
        self.keys = [*policy.state_keys, *policy.image_keys]
        self._index: dict[str, StepIndex] = {}
        self._has_decision = False

    def is_built(self) -> bool:
        """The networks exist from the start (they are sized by the base policy)."""
        return True

    def build(self, first: Transition) -> None:
        """Nothing to build (see :meth:`is_built`)."""

    # ---------------------------------------------------------------- decisions from steps
    def _idx(self, name: str) -> StepIndex:
        buf = getattr(self, name)
        if name not in self._index or self._index[name].buffer is not buf:
            self._index[name] = StepIndex(buf)
        self._index[name].refresh()
        return self._index[name]

    def _rows(self, buf: ReplayBuffer, idx: StepIndex, pos: int) -> tuple[list[int], list[int]] | None:
        """(positions of the frames before the decision's end, positions of its executed steps), or None.

        Mirrors :func:`robot_rl.learners.dsrl.decisions_from_steps`: the episode's first frame repeats before
        step 0; a decision cut short counts only when its last step is terminal.
        """
        cols, to, n = buf.columns, self.dsrl.n_obs_steps, self.dsrl.action_steps
        ep, s0 = int(cols["episode_id"][pos]), int(cols["step"][pos])
        acts = [pos]
        while len(acts) < n and not (cols["terminated"][acts[-1]] or cols["truncated"][acts[-1]]):
            q = idx.find(ep, s0 + len(acts))
            if q is None:
                break
            acts.append(q)
        if len(acts) < n and not cols["terminated"][acts[-1]]:
            return None
        before = [idx.find(ep, max(j, 0)) for j in range(s0 - to + 1, s0)]
        if any(q is None for q in before):
            return None
        return [int(q) for q in before if q is not None] + acts, acts

    def _gather(self, buf: ReplayBuffer, rows: list[tuple[list[int], list[int]]]) -> dict[str, np.ndarray]:
        """Decision columns (as decisions_from_steps makes them) from ``rows`` of one buffer."""
        cols, to, n = buf.columns, self.dsrl.n_obs_steps, self.dsrl.action_steps
        hist = np.array([f[:to] for f, _ in rows], np.int64)
        tail = np.array([f[len(a):len(a) + to - 1] for f, a in rows], np.int64).reshape(len(rows), to - 1)
        last = np.array([a[-1] for _, a in rows], np.int64)
        out = {}
        for k in self.keys:
            out[f"obs.{k}"] = cols[f"obs.{k}"][hist]
            out[f"next_obs.{k}"] = np.concatenate([cols[f"obs.{k}"][tail], cols[f"next_obs.{k}"][last][:, None]], 1)
        out["action"] = cols["action"][np.array([a + [a[-1]] * (n - len(a)) for _, a in rows])]
        out["reward"] = np.array([cols["reward"][a].sum() for _, a in rows], np.float32)
        out["terminated"] = cols["terminated"][last]
        return out

    def _sample(self, name: str, count: int) -> dict[str, np.ndarray] | None:
        """``count`` decisions starting at random rows of buffer ``name`` (None: none could be formed).

        A start in the demo buffer whose decision runs into policy steps is completed from the step buffer.
        """
        buf: ReplayBuffer = getattr(self, name)
        if count <= 0 or len(buf) == 0:
            return None
        idx = self._idx(name)
        groups: dict[str, list[tuple[list[int], list[int]]]] = {"own": [], "steps": []}
        for _ in range(8):  # rejection sampling: starts whose decision is not complete (yet) are drawn again
            for pos in buf.sample_indices(count - len(groups["own"]) - len(groups["steps"]), self.rng):
                if (r := self._rows(buf, idx, int(pos))) is not None:
                    groups["own"].append(r)
                elif name != "steps":
                    ep, step = int(buf.columns["episode_id"][pos]), int(buf.columns["step"][pos])
                    sp = self._idx("steps").find(ep, step)
                    if sp is not None and (r := self._rows(self.steps, self._idx("steps"), sp)) is not None:
                        groups["steps"].append(r)
            if len(groups["own"]) + len(groups["steps"]) >= count:
                break
        parts = [self._gather(b, groups[g]) for g, b in (("own", buf), ("steps", self.steps)) if groups[g]]
        return None if not parts else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def batch(self) -> dict[str, np.ndarray]:
        """A batch of decisions, ``demo_fraction`` of them starting in the human/demo buffer."""
        size = self.cfg.batch_size
        n_demo = round(size * self.cfg.demo_fraction) if len(self.interventions) else 0
        parts = [p for p in (self._sample("interventions", n_demo), self._sample("steps", size - n_demo)) if p]
        if not parts:
            raise ValueError("no complete decision in the buffers yet")
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    # ---------------------------------------------------------------- training
    def train_allowed(self) -> int:
        """As OffPolicyAlgorithm's, and 0 until some decision (``action_steps`` steps of one episode) is stored."""
        n = super().train_allowed()
        if n and not self._has_decision:
            self._has_decision = self._sample("steps", 1) is not None or self._sample("interventions", 1) is not None
        return n if self._has_decision else 0

    def learn(self) -> dict[str, float]:
        """One DSRL-NA update (action critic, noise critic, noise actor, temperature)."""
        metrics = self.dsrl.update(self.batch())
        return {"critic_loss": metrics["q_action_loss"], **metrics}

    def parameters(self) -> list[torch.Tensor]:
        """Noise actor, both critics and the temperature."""
        d = self.dsrl
        return [*d.actor.parameters(), *d.critic.parameters(), *d.q_noise.parameters(), d.log_alpha]

    def can_publish(self) -> bool:
        """As OffPolicyAlgorithm's, and the base still has the weights it was loaded with (else: failure)."""
        if super().can_publish() and policy_fingerprint(self.dsrl.policy) != self.dsrl.fingerprint:
            self.failure = f"update {self.updates}: the frozen base policy's weights changed"
        return super().can_publish()

    def publish(self, folder: Path, version: int) -> None:
        """Write the noise actor (not the critics) as a published version."""
        NoiseActorWeights.write(folder, self.dsrl, version,
                                {"updates": self.updates, "config": config_to_dict(self.cfg)})

    def publish_start(self, folder: Path, version: int) -> None:
        """The run's start as a version: the base's own noise (where the deployment gate goes back to)."""
        NoiseActorWeights.write(folder, self.dsrl, version, {"updates": self.updates}, base_only=True)

    def save_networks(self) -> None:
        """Networks, optimisers, counters into ``dsrl/``: written beside it, then swapped in by two renames."""
        folder = self.ckpt / "dsrl"
        tmp, old = folder.with_name(".dsrl.tmp"), folder.with_name(".dsrl.old")
        shutil.rmtree(tmp, ignore_errors=True)
        self.dsrl.updates = self.updates
        self.dsrl.save(tmp)
        if folder.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------------------ runner entry points
def _base(cfg: RunSettings) -> Policy:
    if not cfg.policy:
        raise ValueError("learner.algorithm: dsrl steers the run's 'policy' checkpoint (a flow / diffusion "
                         "policy); give --policy")
    return Policy.load(cfg.policy)


def make_dsrl_agent(cfg: RunSettings, run: Path) -> DSRLAgent:
    """The actor's agent of a DSRL run: the frozen ``cfg.policy`` steered by the published noise actors."""
    dc = cfg.learner.dsrl
    return DSRLAgent(_base(cfg), weights_dir=Path(run) / "weights", deterministic=not dc.explore,
                     action_steps=dc.latent.action_steps, num_steps=dc.latent.num_steps, seed=cfg.actor.seed,
                     device=cfg.actor.device)


def make_dsrl_algorithm(cfg: RunSettings, checkpoint: Path) -> DSRLAlgorithm:
    """The learner's side of a DSRL run (resumed from ``checkpoint`` when it holds one)."""
    lc, dc = cfg.learner, cfg.learner.dsrl
    torch.manual_seed(dc.seed)
    algorithm = DSRLAlgorithm(dc, _base(cfg), checkpoint, lc.capacity, lc.update_to_data, lc.updates_per_cycle,
                              device=lc.device)
    if lc.demos:
        algorithm.load_demonstrations(lc.demos, cfg.actor.env_id)
    return algorithm


def _agent(cfg: RunSettings, env: Any, run: Path) -> tuple[Any, Any, Any]:
    return TaskReward.of(env, cfg.learner.dsrl), make_dsrl_agent(cfg, run), None


def _evaluation_agent(cfg: RunSettings, folder: Path, env: Any) -> DSRLAgent:
    """The run's frozen policy steered by the published noise actor at its mean."""
    latent = cfg.learner.dsrl.latent
    return DSRLAgent(Policy.load(cfg.policy), deterministic=True, action_steps=latent.action_steps,
                     num_steps=latent.num_steps, device=cfg.actor.device, noise_actor=NoiseActorWeights.load(folder))


ALGORITHM = register(OnlineAlgorithm(
    name="dsrl", config=DSRLRunConfig, make_learner=make_dsrl_algorithm, make_agent=_agent,
    evaluation_agent=_evaluation_agent, marker=MARKER, module=__name__))
"""``learner.algorithm: dsrl``: SAC in the frozen flow / diffusion policy's noise space."""
