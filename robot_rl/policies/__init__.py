"""Imitation policies behind one interface (see :mod:`robot_rl.policies.base`).

Policies are looked up by name; the modules are imported on demand so that torch-free pieces such as
:mod:`robot_rl.policies.chunking` can be used (e.g. by a ROS node) without importing every policy.
"""

from __future__ import annotations

import importlib
from typing import Any

POLICIES: dict[str, str] = {
    "diffusion": "robot_rl.policies.diffusion:DiffusionPolicy",
    "flow": "robot_rl.policies.flow:FlowPolicy",
    "meanflow": "robot_rl.policies.meanflow:MeanFlowPolicy",
    "vla": "robot_rl.policies.vla:VLAPolicy",
    "mlp": "robot_rl.policies.mlp:MLPPolicy",
}


def get_policy_class(name: str) -> Any:
    """The policy class registered under ``name``; ValueError naming the valid choices otherwise."""
    if name not in POLICIES:
        raise ValueError(f"policy type {name!r} is unknown; choose one of {sorted(POLICIES)}")
    module, _, attr = POLICIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)
