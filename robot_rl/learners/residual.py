"""Residual RL on a frozen base in the online runner: SAC learns a bounded per-step correction.

ResFiT (Ankile et al., "Residual Off-Policy RL for Finetuning Behavior Cloning Policies",
arXiv:2509.19301) and Policy Decorator (Yuan et al., 2024) keep the base controller frozen and learn only
a small additive correction: the base already solves most of the task, so exploration stays near it and
the correction cannot wander far. Here the base is a chunked policy checkpoint (run by a PolicyRunner)
or the env's scripted expert (the quadrotor and humanoid tasks, whose expert is the controller to
improve). The RL actor sees the state keys and the base action and executes
``clip(base + scale * tanh(u), -1, 1)``; the critic ensemble scores the executed action (SAC in the RLPD
recipe, :mod:`robot_rl.learners.sac_online`).

During warm-up nothing is published and the actors execute the base action unchanged, bit for bit: the
buffers fill with what the base does before the residual may move (ResFiT's warm-up). Human steps go
into both buffers (the online one and the intervention one that supplies RLPD's other half of every
batch); their executed action is the human's. Rewards, the takeover penalty, HABC credit and the health
checks are :mod:`robot_rl.learners.off_policy`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from robot_rl.learners.off_policy import OffPolicyConfig, TaskReward
from robot_rl.learners.sac_online import MARKER, ActorWeights, SACAgent, SACAlgorithm
from robot_rl.learners.sac_rlpd import SACLearnerConfig

__all__ = ["MARKER", "ResidualActorWeights", "ResidualAgent", "ResidualAlgorithm", "ResidualConfig", "TaskReward",
           "build_base"]

ResidualActorWeights = ActorWeights
"""A published residual actor (the SAC actor format of :mod:`robot_rl.learners.sac_online`)."""


@dataclass
class ResidualConfig(OffPolicyConfig):
    """Residual RL on a frozen base (``learner.algorithm: residual``); reward, warm-up etc. as OffPolicyConfig."""

    base: str = "policy"
    """What the residual corrects: ``policy`` (the run's ``policy`` checkpoint, chunked, run by a
    PolicyRunner) or ``expert`` (the env's scripted expert, e.g. the quadrotor's hover controller)."""
    scale: float = 0.1
    """Largest correction per action dimension (actions live in [-1, 1]); sets SAC's residual_scale."""
    state_keys: list[str] = field(default_factory=list)
    """Observation keys the actor and critics see (besides the base action); empty: every 1-D float key of
    the first transition, sorted by name."""
    sac: SACLearnerConfig = field(default_factory=SACLearnerConfig)
    """SAC / RLPD settings; its ``state_keys``, ``residual_scale`` and ``device`` are set from this section
    and ``learner.device``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.base not in ("policy", "expert"):
            raise ValueError(f"base: must be 'policy' or 'expert', got {self.base!r}")
        if not self.scale > 0:
            raise ValueError(f"scale: must be > 0, got {self.scale}")


class ResidualAgent(SACAgent):
    """``act(obs)``: the frozen base's action plus the newest published residual (none yet: the base's)."""

    def __init__(self, base: Any, weights_dir: str | Path | None = None, deterministic: bool = False,
                 residual: ActorWeights | None = None,
                 accept: Callable[[ActorWeights], str | None] | None = None) -> None:
        super().__init__(base, weights_dir, deterministic, actor=residual, accept=accept)

    @property
    def residual(self) -> ActorWeights | None:
        """The residual acting now (None: the base alone)."""
        return self.actor


def build_base(kind: str, env: gym.Env[Any, Any], policy: str, device: str = "cpu") -> Any:
    """The frozen base of an actor: the env's scripted expert or a PolicyRunner over ``policy`` (no swaps)."""
    if kind == "expert":
        from robot_rl.sim.experts import expert_for

        return expert_for(env)
    if not policy:
        raise ValueError("residual.base: policy needs the run's 'policy' checkpoint folder")
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.policy_runner import PolicyRunner

    return PolicyRunner(Policy.load(policy), device=device)


class ResidualAlgorithm(SACAlgorithm):
    """The learner's side of residual RL: SAC with a residual actor, the base action read from each step.

    The networks are built from the first transitions (their observation shapes and action size), so the
    learner never loads the base. ``checkpoint`` holds ``steps/``, ``interventions/`` and ``sac/``.
    """

    def __init__(self, cfg: ResidualConfig, checkpoint: str | Path, capacity: int, update_to_data: float,
                 updates_per_cycle: int, device: str = "auto") -> None:
        super().__init__(cfg, cfg.sac, cfg.state_keys, cfg.scale, checkpoint, capacity, update_to_data,
                         updates_per_cycle, device)
        self.cfg = cfg
