"""A simulated human supervisor built on a scripted expert: watches the policy, takes over when it drifts.

Like a person with a SpaceMouse (HG-DAgger's gate, HIL-SERL's interventions) it

* judges risk each step: how far the policy's proposed action is from what the expert would do
  (normalised L2, smoothed), or any extra state-based risk (e.g. "the cube is sliding off");
* reacts only after ``reaction_delay`` consecutive risky steps (nobody reacts instantly);
* while in control, acts like the expert with Gaussian hand noise, for at least ``min_takeover_steps``,
  and hands back once the risk has fallen; with ``finish_correction`` only once the task's sub-goal is
  reached too (``secured``, e.g. the cube held and off the table): RaC's recovery *then* correction
  (arXiv:2509.07953), not a hand-back in the middle of the motion that the policy must then complete;
* is reproducible: all noise comes from one seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.core.spaces import SpecError


@dataclass
class SimulatedHumanConfig:
    """When and how the simulated human intervenes."""

    risk_threshold: float = 0.35
    """Smoothed risk above which a step counts as drifting toward failure (action units, [-1, 1] scale)."""
    release_threshold: float = 0.15
    """Smoothed risk below which the human hands control back (after ``min_takeover_steps``)."""
    smoothing: float = 0.5
    """Weight of the newest risk in the exponential moving average (1: no smoothing)."""
    reaction_delay: int = 2
    """Consecutive risky steps before the takeover (0: take over on the first risky step)."""
    min_takeover_steps: int = 5
    """Steps the human keeps control at least once taken over."""
    action_noise: float = 0.05
    """Standard deviation of the Gaussian noise on the human's (expert's) action."""
    max_takeovers: int = 1000
    """Takeovers allowed per episode (a tired human); further drifting is left to fail."""
    finish_correction: bool = False
    """Keep control until the ``secured`` predicate of the task holds (the correction is complete), not only
    until the risk falls: the segment a policy learns from then ends where the policy is safe to go on. On the
    pick-and-lift stand-in the risk-only hand-back came at the cube with the fingers still open (median hand
    height over the cube 0 cm, 33% of hand-backs holding it), and fine-tuning on those segments made the
    policy worse (benchmarks/README.md, The arm on the "real" robot)."""
    expert_gain: float = 1.0
    """Gain of the scripted expert the human acts like (``expert_for(env, gain)``, arm tasks): below 1 the hand
    closes only part of the error each step, as a person does who sees the robot lag behind the stick. On the
    pick-and-lift stand-in (30 ms command delay, doubled damping) the expert at gain 1 overshoots over the
    cube and can pump up and down until the time runs out (39/40 seeds); at 0.5 it succeeds on 40/40, 29
    steps median (24 in the nominal simulator)."""
    action_risk: bool = True
    """Count the policy's disagreement with the expert as risk; False: only ``state_risk`` (a person who
    watches where the robot is going, not every command it sends)."""
    seed: int = 0
    """Seed of the noise generator (reset restarts nothing; use :meth:`SimulatedHuman.seed`)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.release_threshold <= self.risk_threshold:
            raise ValueError(f"release_threshold: must be in [0, risk_threshold={self.risk_threshold}], "
                             f"got {self.release_threshold}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing: must be in (0, 1], got {self.smoothing}")
        if self.reaction_delay < 0 or self.min_takeover_steps < 1 or self.max_takeovers < 0:
            raise ValueError("reaction_delay >= 0, min_takeover_steps >= 1 and max_takeovers >= 0 are required")
        if not 0.0 < self.expert_gain <= 1.0:
            raise ValueError(f"expert_gain: must be in (0, 1], got {self.expert_gain}")
        if self.action_noise < 0:
            raise ValueError(f"action_noise: must be >= 0, got {self.action_noise}")


@dataclass(frozen=True)
class HumanDecision:
    """What the human did at one step."""

    action: np.ndarray
    """The action to execute: the human's when intervening, else the policy's proposal (float32)."""
    intervening: bool
    """The human is in control at this step."""
    risk: float
    """Smoothed risk the human perceived."""


class SimulatedHuman:
    """Call :meth:`step` with every observation and the policy's proposal; :meth:`reset` per episode."""

    def __init__(self, expert: Any, config: SimulatedHumanConfig | None = None,
                 state_risk: Callable[[Mapping[str, np.ndarray]], float] | None = None,
                 secured: Callable[[Mapping[str, np.ndarray]], bool] | None = None) -> None:
        """``secured(obs)``: the task's sub-goal is reached (required by ``finish_correction``).

        Raises:
            ValueError: ``finish_correction`` without ``secured``.
        """
        self.expert, self.config, self.state_risk = expert, config or SimulatedHumanConfig(), state_risk
        if self.config.finish_correction and secured is None:
            raise ValueError("finish_correction needs the task's `secured` predicate (robot_rl.learners.task_risk)")
        self.secured = secured
        self.rng = np.random.default_rng(self.config.seed)
        self.reset()

    def seed(self, seed: int) -> None:
        """Restart the noise generator."""
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        """New episode: in no state of alarm, policy in control."""
        self.risk = 0.0
        self.risky_steps = 0
        self.in_control = False
        self.control_steps = 0
        self.takeovers = 0
        for part in (self.expert, self.state_risk):  # either may remember the episode
            reset = getattr(part, "reset", None)
            if callable(reset):
                reset()

    def step(self, obs: Mapping[str, np.ndarray], policy_action: np.ndarray) -> HumanDecision:
        """Judge the policy's proposal and decide who acts.

        A proposal with NaN/inf is never executed: the human takes over at once (fail safe).

        Raises:
            SpecError: for a proposal with a shape other than the expert's action.
        """
        proposal = np.asarray(policy_action, dtype=np.float32)
        expert_action = np.asarray(self.expert.act(obs), dtype=np.float32)
        if proposal.shape != expert_action.shape:
            raise SpecError(f"policy_action: expected shape {expert_action.shape}, got {proposal.shape}")
        cfg = self.config
        finite = bool(np.all(np.isfinite(proposal)))
        if not finite:
            self.in_control, self.control_steps = True, 0
            self.takeovers += 1
            proposal = np.full_like(expert_action, 2.0)  # maximal disagreement for the risk estimate
        raw = float(np.linalg.norm(np.clip(proposal, -1, 1) - expert_action) / np.sqrt(proposal.size))
        if not cfg.action_risk and finite:
            raw = 0.0
        if self.state_risk is not None:
            raw = max(raw, float(self.state_risk(obs)))
        self.risk = (1 - cfg.smoothing) * self.risk + cfg.smoothing * raw
        if self.in_control and finite:
            self.control_steps += 1
            done = not cfg.finish_correction or (self.secured is not None and self.secured(obs))
            if self.control_steps >= cfg.min_takeover_steps and self.risk < cfg.release_threshold and done:
                self.in_control = False
                self.risky_steps = 0
        elif not self.in_control:
            self.risky_steps = self.risky_steps + 1 if self.risk > cfg.risk_threshold else 0
            if self.risky_steps > cfg.reaction_delay and self.takeovers < cfg.max_takeovers:
                self.in_control, self.control_steps = True, 0
                self.takeovers += 1
        if not self.in_control:
            return HumanDecision(proposal, False, self.risk)
        noisy = expert_action + cfg.action_noise * self.rng.standard_normal(expert_action.shape)
        return HumanDecision(np.clip(noisy, -1.0, 1.0).astype(np.float32), True, self.risk)
