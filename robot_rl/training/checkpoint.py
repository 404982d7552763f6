"""Training state on disk without pickles: optimizer and EMA tensors in safetensors, the rest in JSON.

``<run>/checkpoints/last/`` holds the EMA policy (a normal policy checkpoint that ``robot-rl eval`` and
hot-swap read), ``train_state.safetensors`` (raw weights, EMA weights, optimizer moments) and
``train_state.json`` (step, optimizer hyper-parameters, RNG seed state). Writes go to a temporary folder
that is renamed over the old one, so a crash mid-save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file

from robot_rl.policies.base import CheckpointError, Policy


class Averaged(Protocol):
    """A weight average (loop.Ema): the averaged policy plus its tensors."""

    module: Policy

    def state_dict(self) -> dict[str, torch.Tensor]: ...  # noqa: D102

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> None: ...  # noqa: D102


STATE_TENSORS = "train_state.safetensors"
STATE_META = "train_state.json"


def save_training_state(folder: Path, policy: Policy, ema: Averaged | None, optimizer: torch.optim.Optimizer,
                        step: int, extra: dict[str, Any]) -> Path:
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
    tensors = {f"model.{k}": v.detach().clone() for k, v in policy.state_dict().items()}
    if ema is not None:
        tensors.update({f"ema.{k}": v.detach().clone() for k, v in ema.state_dict().items()})
    opt = optimizer.state_dict()
    for pid, state in opt["state"].items():
        for name, value in state.items():
            tensors[f"opt.{pid}.{name}"] = torch.as_tensor(value).detach().clone()
    save_file(tensors, str(tmp / STATE_TENSORS))
    meta = {"step": step, "param_groups": opt["param_groups"], **extra}
    (tmp / STATE_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    if old.exists():
        shutil.rmtree(old)
    return folder


def load_training_state(folder: Path, policy: Policy, ema: Averaged | None,
                        optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, EMA and optimizer from ``folder``; returns the JSON part (with "step")."""
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
        ema.load_state_dict({k[len("ema."):]: v for k, v in tensors.items() if k.startswith("ema.")}, strict=True)
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return meta
