"""DSRL in the online runner: the actors sample the frozen policy from noise a SAC actor chooses.

Work in progress: the learner (robot_rl.learners.dsrl.DSRLLearner) exists; its online-runner side
(algorithm, published noise actor, actor agent) comes next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robot_rl.learners.dsrl import DSRLConfig
from robot_rl.learners.off_policy import OffPolicyConfig

if TYPE_CHECKING:
    from robot_rl.learners.online_config import OnlineConfig


@dataclass
class DSRLRunConfig(OffPolicyConfig):
    """DSRL-NA (``learner.algorithm: dsrl``); reward, warm-up etc. as OffPolicyConfig."""

    latent: DSRLConfig = field(default_factory=DSRLConfig)
    """Noise actor, action and noise critics (robot_rl.learners.dsrl)."""


def make_dsrl_agent(cfg: OnlineConfig, run: Path) -> Any:
    """The actor's agent of a DSRL run."""
    raise NotImplementedError("learner.algorithm: dsrl is not wired into the online runner yet")


def make_dsrl_algorithm(cfg: OnlineConfig, checkpoint: Path) -> Any:
    """The learner's side of a DSRL run."""
    raise NotImplementedError("learner.algorithm: dsrl is not wired into the online runner yet")
