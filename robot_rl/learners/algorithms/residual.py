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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core.spaces import SpecError
from robot_rl.learners.algorithms.registry import OnlineAlgorithm, RunSettings, register
from robot_rl.learners.off_policy import OffPolicyConfig, TaskReward
from robot_rl.learners.sac_online import MARKER, ActorWeights, SACAgent, SACAlgorithm
from robot_rl.learners.sac_rlpd import SACLearnerConfig

__all__ = [
    "ALGORITHM",
    "MARKER",
    "NORMALISED_MODES",
    "ResidualActorWeights",
    "ResidualAgent",
    "ResidualAlgorithm",
    "ResidualConfig",
    "StreamedResidual",
    "TaskReward",
    "build_base",
    "check_graph",
]

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


# ------------------------------------------------------------------------------------------ the run's pieces
def _learner(cfg: RunSettings, checkpoint: Path) -> ResidualAlgorithm:
    import torch

    lc = cfg.learner
    torch.manual_seed(lc.residual.seed)
    return ResidualAlgorithm(lc.residual, checkpoint, lc.capacity, lc.update_to_data, lc.updates_per_cycle,
                             device=lc.device)


def _agent(cfg: RunSettings, env: gym.Env[Any, Any], run: Path) -> tuple[Any, Any, Any]:
    """A residual agent on its frozen base following the published residuals (the base acts alongside)."""
    rc = cfg.learner.residual
    agent = ResidualAgent(build_base(rc.base, env, cfg.policy, cfg.actor.device), weights_dir=run / "weights",
                          deterministic=not rc.explore)
    return TaskReward.of(env, rc), agent, agent.base_view


def _evaluation_agent(cfg: RunSettings, folder: Path, env: gym.Env[Any, Any]) -> SACAgent:
    """The published SAC actor at its mean, on the run's frozen base."""
    weights = ActorWeights.load(folder)
    base = build_base(cfg.learner.residual.base, env, cfg.policy, cfg.actor.device) if weights.is_residual else None
    return SACAgent(base, deterministic=True, actor=weights, action_dim=weights.action_dim)


def _frozen_start(cfg: RunSettings, env: gym.Env[Any, Any]) -> Any:
    return build_base(cfg.learner.residual.base, env, cfg.policy, cfg.actor.device)


# ------------------------------------------------------------------------------------------ on a ROS graph
NORMALISED_MODES = ("cartesian_delta", "joint_position", "thrust_body_rates")
"""Control modes whose actions live in [-1, 1], where a bounded additive correction means what it says."""


def check_graph(cfg: RunSettings, control_mode: str, observation_keys: Sequence[str], policy: str = "") -> list[str]:
    """A graph actor's residual: on the node's policy, rewarded by success events, in a normalised mode."""
    rc = cfg.learner.residual
    if rc.base != "policy":
        raise ValueError(f"residual.base {rc.base!r}: on a graph the base is the node's policy (base: policy)")
    if rc.reward != "success":
        raise ValueError(f"residual.reward {rc.reward!r}: a graph has only the success events (reward: success)")
    if control_mode not in NORMALISED_MODES:
        raise ValueError(f"control mode {control_mode!r}: a residual needs actions in [-1, 1] {NORMALISED_MODES}")
    missing = sorted(set(rc.state_keys) - set(observation_keys))
    if missing:
        raise ValueError(f"residual.state_keys {missing}: not in the node's observation {sorted(observation_keys)}")
    if cfg.policy and policy and Path(cfg.policy).resolve() != Path(policy).resolve():
        return [f"the run names base {cfg.policy}, the node runs {policy}: the residual corrects the node's"]
    return []


class _GivenBase:
    """The base of a :class:`ResidualAgent` whose action was computed elsewhere this step."""

    def __init__(self) -> None:
        self.action: np.ndarray | None = None

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        assert self.action is not None, "act() before a base action was given"
        return self.action


class StreamedResidual:
    """``act(obs, base)``: ``base`` plus the newest published residual of ``weights_dir`` (none yet: ``base``).

    ``on_swap(version)`` reports a residual that starts acting, ``on_error(message)`` one that was refused
    and a step that fell back to the base (a non-finite observation or result).
    """

    def __init__(self, cfg: ResidualConfig, weights_dir: str | Path,
                 on_swap: Callable[[int], None] | None = None, on_error: Callable[[str], None] | None = None) -> None:
        self._base = _GivenBase()
        self._obs: Mapping[str, np.ndarray] = {}
        self.agent = ResidualAgent(self._base, weights_dir=weights_dir, deterministic=not cfg.explore,
                                   accept=self._fits)
        self.on_swap, self.on_error = on_swap, on_error
        self._reported: set[int] = set()

    @property
    def version(self) -> int:
        """The residual version acting now (0: none yet, the base acts alone)."""
        return self.agent.version

    @property
    def residual(self) -> ActorWeights | None:
        """The residual acting now."""
        return self.agent.residual

    def _fits(self, weights: ActorWeights) -> str | None:
        """The agent's accept-check of a new version: does it fit this tick's observation and base action?"""
        assert self._base.action is not None
        return _misfit(weights, self._obs, self._base.action)

    def act(self, obs: Mapping[str, np.ndarray], base: np.ndarray) -> np.ndarray:
        """The executed action of this step: base + residual, clipped to [-1, 1] (exactly ``base`` without one).

        The agent looks for a newer residual once, before acting; one that does not fit is refused there.
        """
        base = np.asarray(base, np.float32).reshape(-1)
        self._base.action, self._obs = base, obs
        before = self.version
        try:
            action = np.asarray(self.agent.act(obs), np.float32)
        except SpecError as exc:  # a NaN observation: the residual has nothing to say
            self._report(f"residual v{self.version} skipped: {exc}")
            return base.copy()
        finally:
            self._announce(before)
        if not np.all(np.isfinite(action)):
            self._report(f"residual v{self.version} gave a non-finite action; the base acts")
            return base.copy()
        return action

    def _announce(self, before: int) -> None:
        """Report a residual that started acting and every version refused since the last tick."""
        if self.version != before and self.on_swap is not None:
            self.on_swap(self.version)
        for version, why in self.agent.refused.items():
            if version not in self._reported:
                self._reported.add(version)
                self._report(f"refused residual v{version}: {why}; keeping v{self.version}")

    def _report(self, message: str) -> None:
        if self.on_error is not None:
            self.on_error(message)


def _misfit(weights: ActorWeights, obs: Mapping[str, np.ndarray], base: np.ndarray) -> str | None:
    """Why a residual cannot act on this stream (None: it can)."""
    if weights.action_dim != base.size:
        return f"{weights.action_dim} action values, the base gives {base.size}"
    wrong = {k: d for k, d in weights.state_dims.items() if k not in obs or np.asarray(obs[k]).size != d}
    return None if not wrong else f"state {wrong} does not fit the observation {sorted(obs)}"


def _graph_agent(cfg: RunSettings, weights_dir: Path, on_swap: Callable[[int], None] | None = None,
                 on_error: Callable[[str], None] | None = None) -> StreamedResidual:
    return StreamedResidual(cfg.learner.residual, weights_dir, on_swap=on_swap, on_error=on_error)


ALGORITHM = register(OnlineAlgorithm(
    name="residual", config=ResidualConfig, make_learner=_learner, make_agent=_agent,
    evaluation_agent=_evaluation_agent, marker=MARKER, streams=True, graph_agent=_graph_agent,
    check_graph=check_graph, needs_policy=lambda cfg: cfg.learner.residual.base != "expert",
    frozen_start=_frozen_start, module=__name__))
"""``learner.algorithm: residual``: SAC learns a bounded correction on a frozen base (the node's policy on a graph)."""
