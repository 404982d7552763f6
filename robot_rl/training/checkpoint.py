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
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch.optim.lr_scheduler import LRScheduler

from robot_rl.policies.base import CheckpointError, Policy, save_failed
from robot_rl.policies.checkpoint import first_line


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
    try:
        _write_state(tmp, policy, ema, optimizer, step, extra, scheduler)
    except (OSError, SafetensorError) as exc:  # disk full: the previous checkpoint stays, no temporary is left
        shutil.rmtree(tmp, ignore_errors=True)
        raise save_failed(folder, exc) from exc
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    if old.exists():
        shutil.rmtree(old)
    return folder


def _write_state(tmp: Path, policy: Policy, ema: Averaged | None, optimizer: torch.optim.Optimizer, step: int,
                 extra: dict[str, Any], scheduler: LRScheduler | None) -> None:
    """Write the exported policy and the training state into the temporary folder ``tmp``."""
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


def load_training_state(folder: Path, policy: Policy, ema: Averaged | None, optimizer: torch.optim.Optimizer,
                        scheduler: LRScheduler | None = None) -> dict[str, Any]:
    """Restore weights, EMA, optimizer and scheduler from ``folder``; returns the JSON part (with "step").

    Checkpoints written before the scheduler and the EMA count were saved resume at their step: both
    are functions of it (the count is one initial copy plus one update per step).
    """
    if not (folder / STATE_TENSORS).is_file() or not (folder / STATE_META).is_file():
        raise CheckpointError(f"{folder}: no training state to resume from")
    try:
        meta = json.loads((folder / STATE_META).read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CheckpointError(f"{folder / STATE_META}: not valid UTF-8 JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{folder / STATE_META}: expected a JSON object, got {type(meta).__name__}")
    try:
        tensors = load_file(str(folder / STATE_TENSORS))
    except SafetensorError as exc:
        raise CheckpointError(f"{folder / STATE_TENSORS}: not a readable safetensors file ({exc})") from exc
    bad_values = [k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad_values:
        raise CheckpointError(f"{folder / STATE_TENSORS}: non-finite values in {bad_values[:3]}")
    model = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    own = policy.state_dict()
    bad = [k for k in own if k not in model or model[k].shape != own[k].shape]
    if bad or len(model) != len(own):
        raise CheckpointError(f"{folder}: training state does not match the policy (e.g. {bad[:3]})")
    try:
        return _restore(meta, tensors, model, policy, ema, optimizer, scheduler)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RuntimeError) as exc:
        raise CheckpointError(f"{folder / STATE_META}: training state cannot be restored "
                              f"({first_line(exc)})") from exc


def _restore(meta: dict[str, Any], tensors: dict[str, torch.Tensor], model: dict[str, torch.Tensor], policy: Policy,
             ema: Averaged | None, optimizer: torch.optim.Optimizer, scheduler: LRScheduler | None) -> dict[str, Any]:
    """Copy checked tensors and JSON state into the live objects (errors are turned into CheckpointError)."""
    step = meta["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"'step' must be a non-negative integer, got {str(step)[:40]!r}")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for index, entries in state.items():
        if not 0 <= index < len(params):
            raise ValueError(f"optimizer state for parameter {index}, the optimizer has {len(params)}")
        for entry, tensor in entries.items():
            if tensor.dim() and tensor.shape != params[index].shape:
                raise ValueError(f"optimizer state opt.{index}.{entry} has shape {tuple(tensor.shape)}, "
                                 f"the parameter {tuple(params[index].shape)}")
    names = {frozenset(entries) for entries in state.values()}
    if len(names) > 1:
        raise ValueError(f"optimizer state entries differ between parameters: {sorted(map(sorted, names))[:2]}")
    groups = meta["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise ValueError("'param_groups' must be a list of objects")
    before = optimizer.state_dict()
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    if scheduler is not None:
        try:
            if "scheduler" in meta:
                if not isinstance(meta["scheduler"], dict):
                    raise ValueError("'scheduler' must be an object")
                scheduler.load_state_dict(meta["scheduler"])
            else:
                scheduler.last_epoch = step
        except Exception:
            optimizer.load_state_dict(before)
            raise
    policy.load_state_dict(model, strict=True)
    if ema is not None:
        averaged = {k[len("ema."):]: v for k, v in tensors.items() if k.startswith("ema.")}
        ema.load_state_dict(averaged or model, strict=True)  # a state saved without an average starts one here
        ema.count = int(meta.get("ema_count", step + 1))
    return meta
