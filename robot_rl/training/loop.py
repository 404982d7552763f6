"""The one training loop every policy uses (as stable-baselines3 keeps one loop in ``common/``).

Policies only provide ``compute_loss(batch)``; this module owns the optimizer (AdamW, warm-up + cosine
learning rate, gradient clipping), the exponential moving average of the weights that is exported for
inference, TensorBoard logs, a progress bar, periodic crash-safe checkpoints and resume.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from robot_rl.core.config import ConfigError, load_config, save_config
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import CheckpointError, Policy, PolicyConfig
from robot_rl.training.checkpoint import load_training_state, save_training_state
from robot_rl.training.dataset import ChunkDataset

PolicyType = Literal["diffusion", "flow", "meanflow", "vla"]


@dataclass
class TrainConfig:
    """A training run: which policy, which data, how long."""

    policy_type: PolicyType = "flow"
    """Policy to train (see robot_rl.policies.POLICIES)."""
    policy: dict[str, Any] = field(default_factory=dict)
    """Settings of that policy's config class (e.g. FlowConfig); unknown keys are an error."""
    dataset: str = ""
    """Episode store (zarr) to train from; the CLI also accepts a LeRobot v3 folder (imported first)."""
    max_episodes: int | None = None
    """Use only the first N episodes (None: all)."""
    steps: int = 3000
    """Optimizer steps in total (resume continues up to this number)."""
    batch_size: int = 64
    """Windows per optimizer step."""
    lr: float = 1e-3
    """Peak learning rate (AdamW)."""
    weight_decay: float = 1e-6
    """AdamW weight decay."""
    warmup_steps: int = 100
    """Linear warm-up, then cosine decay to 10% of ``lr``."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this (0 disables)."""
    ema_decay: float = 0.995
    """Decay of the exported weight average (0: export the raw weights)."""
    log_every: int = 50
    """TensorBoard scalars every N steps."""
    checkpoint_every: int = 1000
    """Checkpoint every N steps (and always at the end)."""
    seed: int = 0
    """Seeds torch and the batch sampler."""
    num_threads: int = 1
    """torch CPU threads (1 is fastest on a shared 2-core machine)."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_every", "checkpoint_every", "num_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr: must be a positive number, got {self.lr}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay: must be in [0, 1), got {self.ema_decay}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.weight_decay < 0:
            raise ValueError("warmup_steps, grad_clip and weight_decay must be >= 0")
        if self.max_episodes is not None and self.max_episodes < 1:
            raise ValueError(f"max_episodes: must be >= 1, got {self.max_episodes}")
        self.policy_config()

    def policy_config(self) -> PolicyConfig:
        """The typed config of the chosen policy (ConfigError naming a bad key)."""
        try:
            return load_config(get_policy_class(self.policy_type).config_cls, self.policy)
        except ConfigError as exc:
            raise ConfigError(f"policy.{exc}") from exc


@dataclass
class TrainResult:
    """What a run did."""

    steps: int
    """Optimizer steps done in total (including resumed ones)."""
    seconds: float
    """Wall time of this call."""
    losses: list[float]
    """Mean loss of each logging interval of this call."""
    policy_path: Path
    """Checkpoint folder of the exported (EMA) policy."""


class Ema:
    """Exponential moving average of a policy's parameters (buffers copied), kept as a second policy."""

    def __init__(self, policy: Policy, decay: float) -> None:
        self.module = type(policy)(policy.config, policy.spec)
        self.module.load_state_dict(policy.state_dict())
        self.module.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, policy: Policy, step: int) -> None:
        """Move the average toward the current weights."""
        decay = min(self.decay, (1 + step) / (10 + step))  # short warm-up so early checkpoints are usable
        for mine, theirs in zip(self.module.parameters(), policy.parameters()):
            mine.lerp_(theirs, 1 - decay)
        for buf, src in zip(self.module.buffers(), policy.buffers()):
            buf.copy_(src)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged policy's tensors."""
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> None:
        """Restore the averaged policy's tensors."""
        self.module.load_state_dict(state, strict=strict)


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Warm-up then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train(cfg: TrainConfig, out_dir: str | Path, dataset: ChunkDataset | None = None, resume: bool = False,
          progress: bool = True, log: Callable[[int, dict[str, float]], None] | None = None) -> TrainResult:
    """Train ``cfg.policy_type`` on ``dataset`` (default: read ``cfg.dataset``); checkpoints under ``out_dir``."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    out = Path(out_dir)
    last = out / "checkpoints" / "last"
    if last.exists() and not resume:
        raise CheckpointError(f"{out}: already holds a run; pass resume=True (--resume) or use a new folder")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    pcfg = cfg.policy_config()
    if dataset is None:
        if not cfg.dataset:
            raise ConfigError("dataset: no dataset given")
        dataset = ChunkDataset.from_store(cfg.dataset, pcfg.state_keys, pcfg.image_keys, pcfg.n_obs_steps,
                                          pcfg.horizon, cfg.max_episodes)
    policy: Policy = get_policy_class(cfg.policy_type)(pcfg, dataset.spec)
    policy.set_stats(dataset.stats())
    if dataset.tasks:  # the default instruction at inference: the most frequent task text (first on ties)
        policy.task = Counter(dataset.tasks).most_common(1)[0][0]
    ema = Ema(policy, cfg.ema_decay) if cfg.ema_decay > 0 else None
    if ema is not None:
        ema.module.task = policy.task
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = 0
    if resume and last.exists():
        start = int(load_training_state(last, policy, ema, optimizer)["step"])
    out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, out / "train_config.yaml")
    rng = np.random.default_rng([cfg.seed, start])
    writer = SummaryWriter(str(out / "tensorboard"))
    losses: list[float] = []
    window: dict[str, list[float]] = {}
    t0 = time.perf_counter()
    policy.train()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train {cfg.policy_type}",
               disable=not progress, dynamic_ncols=True)
    try:
        for step in bar:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(cfg, step)
            policy.train_progress = step / cfg.steps
            loss, metrics = policy.compute_loss(dataset.sample(cfg.batch_size, rng))
            if not torch.isfinite(loss):
                raise FloatingPointError(f"step {step}: loss is {loss.item()}; stopping (last checkpoint kept)")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip))
            optimizer.step()
            if ema is not None:
                ema.update(policy, step)
            for k, v in metrics.items():
                window.setdefault(k, []).append(v)
            done = step + 1
            if done % cfg.log_every == 0 or done == cfg.steps:
                means = {k: float(np.mean(v)) for k, v in window.items()}
                window.clear()
                losses.append(means["loss"])
                for k, v in means.items():
                    writer.add_scalar(f"train/{k}", v, done)
                writer.add_scalar("train/lr", learning_rate(cfg, step), done)
                bar.set_postfix(loss=f"{means['loss']:.4f}")
                if log is not None:
                    log(done, means)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                save_training_state(last, policy, ema, optimizer, done, {"seconds": time.perf_counter() - t0})
    finally:
        writer.close()
        bar.close()
    final = out / "policy"
    if last.exists():
        if final.exists():
            shutil.rmtree(final)
        shutil.copytree(last, final, ignore=shutil.ignore_patterns("train_state.*"))
    return TrainResult(steps=max(start, cfg.steps), seconds=time.perf_counter() - t0, losses=losses,
                       policy_path=final)
