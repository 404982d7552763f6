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
from typing import Any

from robot_rl.learners.algorithms.registry import OnlineAlgorithm, RunSettings, register
from robot_rl.learners.off_policy import OffPolicyConfig, TaskReward
from robot_rl.learners.sac_online import MARKER, ActorWeights, SACAgent, SACAlgorithm
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


def _learner(cfg: RunSettings, checkpoint: Path) -> RLPDAlgorithm:
    import torch

    lc = cfg.learner
    torch.manual_seed(lc.rlpd.seed)
    rlpd = RLPDAlgorithm(lc.rlpd, checkpoint, lc.capacity, lc.update_to_data, lc.updates_per_cycle, device=lc.device)
    if lc.demos:
        rlpd.load_demonstrations(lc.demos, cfg.actor.env_id)
    return rlpd


def _agent(cfg: RunSettings, env: Any, run: Path) -> tuple[Any, Any, Any]:
    """A SAC agent alone (no base) following the published actors."""
    import numpy as np

    rc = cfg.learner.rlpd
    dim = int(np.prod(env.action_space.shape or (1,)))
    return TaskReward.of(env, rc), SACAgent(None, run / "weights", not rc.explore, action_dim=dim,
                                            seed=cfg.actor.seed), None


def _evaluation_agent(cfg: RunSettings, folder: Path, env: Any) -> SACAgent:
    """The published SAC actor at its mean."""
    weights = ActorWeights.load(folder)
    return SACAgent(None, deterministic=True, actor=weights, action_dim=weights.action_dim)


ALGORITHM = register(OnlineAlgorithm(
    name="rlpd", config=RLPDConfig, make_learner=_learner, make_agent=_agent, evaluation_agent=_evaluation_agent,
    marker=MARKER, needs_policy=lambda cfg: False, module=__name__))
"""``learner.algorithm: rlpd``: SAC from scratch; needs no policy (and no graph actor runs it)."""
