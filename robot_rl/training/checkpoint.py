"""Training state on disk without pickles: optimizer and EMA tensors in safetensors, the rest in JSON.

``<run>/checkpoints/last/`` holds the EMA policy (a normal policy checkpoint that ``robot-rl eval`` and
hot-swap read), ``train_state.safetensors`` (raw weights, EMA weights, optimizer moments) and
``train_state.json`` (step, optimizer hyper-parameters, learning-rate scheduler, EMA update count).
Writes go to a temporary folder that is renamed over the old one, so a crash mid-save leaves the previous
checkpoint intact. Tensors are written from CPU copies and loaded onto whatever device the policy and
optimizer live on, so a run trained on a GPU resumes (or is evaluated) on a CPU and back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file
from torch.optim.lr_scheduler import LRScheduler

from robot_rl.policies.base import CheckpointError, Policy


class Averaged(Protocol):
    """A weight average (loop.Ema): the averaged policy, its tensors and its update count."""

    module: Policy
    count: int

    def state_dict(self) -> dict[str, torch.Tensor]: ...  # noqa: D102

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> None: ...  # noqa: D102


STATE_TENSORS = "train_state.safetensors"
STATE_META = "train_state.json"


def _cpu(value: Any) -> torch.Tensor:
    """A CPU copy of a tensor (safetensors writes CPU tensors; a GPU tensor is copied off the device)."""
    return torch.as_tensor(value).detach().to("cpu", copy=True)


def save_training_state(folder: Path, policy: Policy, ema: Averaged | None, optimizer: torch.optim.Optimizer,
                        step: int, extra: dict[str, Any], scheduler: LRScheduler | None = None) -> Path:
    """Atomically replace ``folder`` with the policy (EMA weights when given) and the full training state."""
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    export = policy
    if ema is not None:
        export = ema.module
        export.version = step
    else:
        policy.version = step
    export.save(tmp)
    tensors = {f"model.{k}": _cpu(v) for k, v in policy.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": _cpu(v) for k, v in ema.state_dict().items()})
    opt = optimizer.state_dict()
    for pid, state in opt["state"].items():
        for name, value in state.items():
            tensors[f"opt.{pid}.{name}"] = _cpu(value)
    save_file(tensors, str(tmp / STATE_TENSORS))
    meta = {"step": step, "param_groups": opt["param_groups"], **extra}
    if scheduler is not None:
        meta["scheduler"] = scheduler.state_dict()
    if ema is not None:
        meta["ema_count"] = ema.count
    (tmp / STATE_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    if old.exists():
        shutil.rmtree(old)
    return folder


def load_training_state(folder: Path, policy: Policy, ema: Averaged | None, optimizer: torch.optim.Optimizer,
                        scheduler: LRScheduler | None = None) -> dict[str, Any]:
    """Restore weights, EMA, optimizer and scheduler from ``folder``; returns the JSON part (with "step").

    Checkpoints written before the scheduler and the EMA count were saved resume at their step: both
    are functions of it (the count is one initial copy plus one update per step).
    """
    if not (folder / STATE_TENSORS).is_file() or not (folder / STATE_META).is_file():
        raise CheckpointError(f"{folder}: no training state to resume from")
    meta = json.loads((folder / STATE_META).read_text(encoding="utf-8"))
    tensors = load_file(str(folder / STATE_TENSORS))
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    own = policy.state_dict()
    bad = [k for k in own if k not in model or model[k].shape != own[k].shape]
    if bad or len(model) != len(own):
        raise CheckpointError(f"{folder}: training state does not match the policy (e.g. {bad[:3]})")
    policy.load_state_dict(model, strict=True)
    if ema is not None:
        averaged = {k[len("ema."):]: v for k, v in tensors.items() if k.startswith("ema.")}
        ema.load_state_dict(averaged or model, strict=True)  # a state saved without an average starts one here
        ema.count = int(meta.get("ema_count", int(meta["step"]) + 1))
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if scheduler is not None:
        if "scheduler" in meta:
            scheduler.load_state_dict(meta["scheduler"])
        else:
            scheduler.last_epoch = int(meta["step"])
    return meta
