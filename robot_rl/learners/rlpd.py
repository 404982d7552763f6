"""RLPD in the online runner: SAC from scratch on a Gaussian MLP actor, half of every batch from demonstrations.

Ball et al., "Efficient Online Reinforcement Learning with Offline Data" (arXiv:2302.02948): no
pre-training, no behaviour-cloning term; symmetric sampling (50 % online steps, 50 % demonstrations),
a LayerNorm critic ensemble and a high update-to-data ratio make plain SAC learn from a handful of
demonstrations. Here the demo half is the run's ``learner.demos`` episode store plus every human
intervention (HIL-SERL routes them the same way). Demonstrations are stored with the same reward the
actors record: the env's shaped reward (``reward: env``) or the sparse per-step success, read from the
demonstration's observations (:mod:`robot_rl.learners.task_success`), since stores keep one success flag
per episode only.

The networks are built from the demonstrations when there are any
(:meth:`~robot_rl.learners.off_policy.OffPolicyAlgorithm.load_demonstrations`), so version 1 is
published right after the first update; until a version exists the actors act uniformly at random (SAC's usual start).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.learners.off_policy import OffPolicyConfig
from robot_rl.learners.sac_online import SACAlgorithm
from robot_rl.learners.sac_rlpd import SACLearnerConfig


@dataclass
class RLPDConfig(OffPolicyConfig):
    """RLPD (``learner.algorithm: rlpd``); reward, warm-up etc. as OffPolicyConfig."""

    state_keys: list[str] = field(default_factory=list)
    """Observation keys the actor and critics see; empty: every 1-D float key of the first step, sorted."""
    sac: SACLearnerConfig = field(default_factory=SACLearnerConfig)
    """SAC settings (RLPD's: 10 critics, 2 in the target, UTD ratio in ``utd_ratio``)."""


class RLPDAlgorithm(SACAlgorithm):
    """SAC with a plain actor; the demo buffer starts with the demonstrations (see the module docstring)."""

    def __init__(self, cfg: RLPDConfig, checkpoint: str | Path, capacity: int, update_to_data: float,
                 updates_per_cycle: int, device: str = "auto") -> None:
        super().__init__(cfg, cfg.sac, cfg.state_keys, 0.0, checkpoint, capacity, update_to_data,
                         updates_per_cycle, device)
        self.cfg = cfg
