"""RLPD in the online runner: SAC from scratch on a Gaussian MLP actor, half of every batch from demonstrations.

Ball et al., "Efficient Online Reinforcement Learning with Offline Data" (arXiv:2302.02948): no
pre-training, no behaviour-cloning term; symmetric sampling (50 % online steps, 50 % demonstrations),
a LayerNorm critic ensemble and a high update-to-data ratio make plain SAC learn from a handful of
demonstrations. Here the demo half is the run's ``learner.demos`` episode store plus every human
intervention (HIL-SERL routes them the same way). Demonstrations are stored with the same reward the
actors record: the env's shaped reward (``reward: env``) or the sparse per-step success, read from the
demonstration's observations (:mod:`robot_rl.learners.task_success`), since stores keep one success flag
per episode only.

The networks are built from the demonstrations when there are any, so version 1 is published right
after the first update; until a version exists the actors act uniformly at random (SAC's usual start).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.store import EpisodeStore
from robot_rl.learners.off_policy import OffPolicyConfig
from robot_rl.learners.sac_online import SACAlgorithm
from robot_rl.learners.sac_rlpd import SACConfig


@dataclass
class RLPDConfig(OffPolicyConfig):
    """RLPD (``learner.algorithm: rlpd``); reward, warm-up etc. as OffPolicyConfig."""

    state_keys: list[str] = field(default_factory=list)
    """Observation keys the actor and critics see; empty: every 1-D float key of the first step, sorted."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC settings (RLPD's: 10 critics, 2 in the target, UTD ratio in ``utd_ratio``)."""


def demo_transitions(store_path: str | Path, reward: str,
                     success_of: Callable[[Mapping[str, np.ndarray]], bool] | None,
                     episode_offset: int = 10**12, end_on_success: bool = False) -> list[Transition]:
    """Every step of the store's episodes, rewarded as the actors reward theirs, marked as demonstrations.

    ``reward: success`` needs ``success_of`` (an observation -> success function): a step's reward is 1
    when its next observation shows the task done (``end_on_success``: that step ends the demonstration,
    terminal, as it ends the actors' episodes). Episode ids are shifted by ``episode_offset`` so they
    never collide with the actors' ids.
    """
    if reward == "success" and success_of is None:
        raise ValueError("demonstrations with reward: success need the task's observed success")
    out: list[Transition] = []
    with EpisodeStore.open(store_path) as store:
        for index in range(store.num_episodes):
            for t in store.transitions(index):
                r = float(success_of(t.next_observation)) if reward == "success" and success_of else t.reward
                done = end_on_success and r > 0
                out.append(t.replace(reward=r, episode_id=episode_offset + t.episode_id, is_intervention=True,
                                     segment_source=SegmentSource.HUMAN, terminated=t.terminated or done,
                                     truncated=t.truncated and not done))
                if done:
                    break
    return out


class RLPDAlgorithm(SACAlgorithm):
    """SAC with a plain actor; the demo buffer starts with the demonstrations (see the module docstring)."""

    def __init__(self, cfg: RLPDConfig, checkpoint: str | Path, capacity: int, update_to_data: float,
                 updates_per_cycle: int, device: str = "auto", demos: list[Transition] | None = None) -> None:
        super().__init__(cfg, cfg.sac, cfg.state_keys, 0.0, checkpoint, capacity, update_to_data,
                         updates_per_cycle, device)
        self.cfg = cfg
        self.demos = 0
        """Demonstration steps loaded into the demo buffer."""
        if demos and self.resumed_from is None:  # a resumed learner has them in its saved demo buffer
            self.build(demos[0])
            self.interventions.extend(demos)
            self.demos = len(demos)
