"""Imitation policies behind one interface (see :mod:`robot_rl.policies.base`).

Policies are looked up by name; the modules are imported on demand so that torch-free pieces such as
:mod:`robot_rl.policies.chunking` can be used (e.g. by a ROS node) without importing every policy.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

POLICIES: dict[str, str] = {
    "diffusion": "robot_rl.policies.diffusion:DiffusionPolicy",
    "flow": "robot_rl.policies.flow:FlowPolicy",
    "meanflow": "robot_rl.policies.meanflow:MeanFlowPolicy",
    "vla": "robot_rl.policies.vla:VLAPolicy",
    "mlp": "robot_rl.policies.mlp:MLPPolicy",
}

ADAPTERS: dict[str, str] = {
    "lerobot": "robot_rl.policies.lerobot_adapter:LeRobotPolicy",
}
"""Checkpoints written by other libraries, run through an adapter: name -> a Policy class with
``is_checkpoint(path)`` and ``load(path)``. :meth:`Policy.load` tries them on a folder without policy.json."""


def get_policy_class(name: str) -> Any:
    """The policy class registered under ``name``; ValueError naming the valid choices otherwise."""
    if name not in POLICIES:
        raise ValueError(f"policy type {name!r} is unknown; choose one of {sorted(POLICIES)}")
    module, _, attr = POLICIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def adapter_for(path: str | Path) -> Any:
    """The adapter class (from :data:`ADAPTERS`) for a checkpoint folder another library wrote, or None."""
    if (Path(path) / "policy.json").is_file():
        return None
    for target in ADAPTERS.values():
        module, _, attr = target.partition(":")
        klass = getattr(importlib.import_module(module), attr)
        if klass.is_checkpoint(path):
            return klass
    return None
