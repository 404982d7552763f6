"""The one training loop every policy uses (as stable-baselines3 keeps one loop in ``common/``).

Policies only provide ``compute_loss(batch)``; this module owns the device, the optimizer (AdamW,
warm-up + cosine learning rate as a ``torch.optim.lr_scheduler.LambdaLR``, gradient clipping), the
exponential moving average of the weights that is exported for inference (``torch.optim.swa_utils``'
AveragedModel), TensorBoard logs, a progress bar, periodic crash-safe checkpoints and resume.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from robot_rl.core.config import ConfigError, load_config, save_config
from robot_rl.core.device import check_device_name, resolve_device, to_device
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
    start_fraction: float = 0.0
    """Fraction of each batch drawn from the first ``start_steps`` frames of the episodes (0: uniform windows).

    For camera policies: at an episode's start only the images say where the object is, and those windows are
    a small share of uniform batches (the "copycat" shortcut, see robot_rl.training.diagnose)."""
    start_steps: int = 10
    """Frames from an episode's start that ``start_fraction`` draws from."""
    checkpoint_every: int = 1000
    """Checkpoint every N steps (and always at the end)."""
    seed: int = 0
    """Seeds torch and the batch sampler."""
    num_threads: int = 1
    """torch CPU threads (1 is fastest on a shared 2-core machine)."""
    device: str = "auto"
    """Where the policy trains: "auto" (CUDA when available, else CPU), "cpu" or "cuda". Checkpoints are
    written from CPU copies, so a policy trained on a GPU loads anywhere."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        for name in ("steps", "batch_size", "log_every", "checkpoint_every", "num_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr: must be a positive number, got {self.lr}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay: must be in [0, 1), got {self.ema_decay}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.weight_decay < 0:
            raise ValueError("warmup_steps, grad_clip and weight_decay must be >= 0")
        if not 0.0 <= self.start_fraction <= 1.0 or self.start_steps < 1:
            raise ValueError(f"start_fraction must be in [0, 1] and start_steps >= 1, got {self.start_fraction}, "
                             f"{self.start_steps}")
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


class _Rebuilt(nn.Module):
    """Holds a policy; deep-copied by rebuilding it from its config and copying the tensors.

    AveragedModel deep-copies the model it averages, and a Policy cannot be deep-copied (it holds the lock
    of its weight hot-swap); building a fresh one is also what the average needs (no history, no staged
    weights).
    """

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    def __deepcopy__(self, memo: dict[int, Any]) -> _Rebuilt:
        src = self.policy
        clone = type(src)(src.config, src.spec)
        clone.load_state_dict(src.state_dict())
        clone.task = src.task
        return _Rebuilt(clone.to(next(src.parameters()).device))


def ema_warmup_multi_avg_fn(decay: float) -> Callable[[Any, Any, torch.Tensor | int], None]:
    """``get_ema_multi_avg_fn`` whose decay after ``n`` averages is ``min(decay, n / (n + 9))``.

    The short warm-up lets checkpoints taken early in a run export usable weights instead of the
    initialisation.
    """
    def update(averaged: Any, current: Any, n_averaged: torch.Tensor | int) -> None:
        n = int(n_averaged)
        get_ema_multi_avg_fn(min(decay, n / (n + 9)))(averaged, current, n_averaged)

    return update


class Ema:
    """Exponential moving average of a policy's parameters (buffers copied), kept as a second policy.

    ``warmup``: the decay ramps up over the first updates (a fresh network's early weights are soon left
    behind); without it the decay holds from the start, for a policy that is already an average (fine-tuning).
    """

    def __init__(self, policy: Policy, decay: float, warmup: bool = True) -> None:
        avg_fn = ema_warmup_multi_avg_fn(decay) if warmup else get_ema_multi_avg_fn(decay)
        self.averaged = AveragedModel(_Rebuilt(policy), multi_avg_fn=avg_fn)
        holder = self.averaged.module
        assert isinstance(holder, _Rebuilt)
        self.module: Policy = holder.policy
        self.module.requires_grad_(False)
        self.decay = decay
        self.averaged.update_parameters(policy)  # the first update copies: n_averaged = 1 before step 0

    @property
    def count(self) -> int:
        """Updates so far, the initial copy included (the decay warm-up reads it; saved with the state)."""
        return int(self.averaged.n_averaged)

    @count.setter
    def count(self, value: int) -> None:
        self.averaged.n_averaged.fill_(int(value))

    def update(self, policy: Policy) -> None:
        """Move the average toward the current weights; buffers (normaliser statistics) are copied."""
        self.averaged.update_parameters(policy)  # use_buffers=False: buffers are copied, not averaged

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The averaged policy's tensors."""
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> None:
        """Restore the averaged policy's tensors."""
        self.module.load_state_dict(state, strict=strict)


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Warm-up then cosine decay to 10% of the peak (the schedule's closed form, for logs and tests)."""
    return cfg.lr * lr_factor(cfg, step)


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Multiplier of the peak ``lr`` at ``step``: linear warm-up, then cosine decay to 0.1 (LambdaLR's lambda)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def make_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer) -> LambdaLR:
    """The run's learning-rate schedule; it sets the optimizer's lr for step 0 at once."""
    return LambdaLR(optimizer, partial(lr_factor, cfg))


def follow_config(cfg: TrainConfig, optimizer: torch.optim.Optimizer, scheduler: LambdaLR) -> None:
    """After a resume, take the peak lr from the current config (``--set lr=...``), not the checkpoint's.

    The schedule's lambda already reads ``steps`` and ``warmup_steps`` from ``cfg``; the step comes from
    the restored scheduler.
    """
    scheduler.base_lrs = [cfg.lr for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.lr
        group["lr"] = learning_rate(cfg, scheduler.last_epoch)


def train(cfg: TrainConfig, out_dir: str | Path, dataset: ChunkDataset | None = None, resume: bool = False,
          progress: bool = True, log: Callable[[int, dict[str, float]], None] | None = None) -> TrainResult:
    """Train ``cfg.policy_type`` on ``dataset`` (default: read ``cfg.dataset``); checkpoints under ``out_dir``."""
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    out = Path(out_dir)
    last = out / "checkpoints" / "last"
    if last.exists() and not resume:
        raise CheckpointError(f"{out}: already holds a run; pass resume=True (--resume) or use a new folder")
    device = resolve_device(cfg.device)
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    pcfg = cfg.policy_config()
    if dataset is None:
        if not cfg.dataset:
            raise ConfigError("dataset: no dataset given")
        dataset = ChunkDataset.from_store(cfg.dataset, pcfg.state_keys, pcfg.image_keys, pcfg.n_obs_steps,
                                          pcfg.horizon, cfg.max_episodes, pcfg.aux_keys)
    policy: Policy = get_policy_class(cfg.policy_type)(pcfg, dataset.spec)
    policy.set_stats(dataset.stats())
    if dataset.tasks:  # the default instruction at inference: the most frequent task text (first on ties)
        policy.task = Counter(dataset.tasks).most_common(1)[0][0]
    policy.to(device)
    ema = Ema(policy, cfg.ema_decay) if cfg.ema_decay > 0 else None
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = make_scheduler(cfg, optimizer)
    start = 0
    if resume and last.exists():
        start = int(load_training_state(last, policy, ema, optimizer, scheduler)["step"])
        follow_config(cfg, optimizer, scheduler)
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
            lr = optimizer.param_groups[0]["lr"]
            policy.train_progress = step / cfg.steps
            batch = dataset.sample(cfg.batch_size, rng, cfg.start_fraction, cfg.start_steps)
            loss, metrics = policy.compute_loss(to_device(batch, device))
            if not torch.isfinite(loss):
                raise FloatingPointError(f"step {step}: loss is {loss.item()}; stopping (last checkpoint kept)")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip))
            optimizer.step()
            scheduler.step()
            if ema is not None:
                ema.update(policy)
            for k, v in metrics.items():
                window.setdefault(k, []).append(v)
            done = step + 1
            if done % cfg.log_every == 0 or done == cfg.steps:
                means = {k: float(np.mean(v)) for k, v in window.items()}
                window.clear()
                losses.append(means["loss"])
                for k, v in means.items():
                    writer.add_scalar(f"train/{k}", v, done)
                writer.add_scalar("train/lr", lr, done)
                bar.set_postfix(loss=f"{means['loss']:.4f}")
                if log is not None:
                    log(done, means)
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                save_training_state(last, policy, ema, optimizer, done, {"seconds": time.perf_counter() - t0},
                                    scheduler)
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
