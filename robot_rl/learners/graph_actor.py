"""The actor side of an online run whose steps come from a ROS graph (the policy node), not from an env.

A process actor (:mod:`robot_rl.learners.actor_process`) owns a simulator and calls its agent
synchronously. On a graph, the policy node's :class:`~robot_rl.runtime.policy_runner.PolicyRunner`
predicts chunks on its own thread (a timer must never wait for a network), so the policy's action of a
tick is computed there; this module adds what the run's algorithm puts on top of it:

* ``hg_dagger``: nothing; the runner itself swaps in the fine-tuned policies;
* ``residual``: the newest published residual, on the node's policy as the frozen base
  (:class:`StreamedResidual`), swapped in between steps; a residual that does not fit the node's
  observation or action is refused and the running one keeps acting.

Reward on a graph is sparse success, as a real robot has it: an ``episode_event`` success (from an
operator, or a success detector publishing it) ends the episode with reward 1
(:class:`~robot_rl.runtime.step_stream.StepStream`). A graph has no shaped env reward and no scripted
expert, so ``reward: env`` and ``base: expert`` are refused, as are algorithms whose agent no node runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import yaml

from robot_rl.core.config import ConfigError
from robot_rl.core.spaces import SpecError
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.residual import ResidualActorWeights, ResidualAgent, ResidualConfig
from robot_rl.learners.roles import CONFIG_FILE, load_run_config

STREAMABLE = ("hg_dagger", "residual")
"""Algorithms a graph actor can act in."""
NORMALISED_MODES = ("cartesian_delta", "joint_position", "thrust_body_rates")
"""Control modes whose actions live in [-1, 1], where a bounded additive correction means what it says."""


def read_run_config(run: str | Path) -> OnlineConfig | None:
    """The run folder's config once its learner wrote it; None before (or while it is half written)."""
    if not (Path(run) / CONFIG_FILE).is_file():
        return None
    try:
        return load_run_config(run)
    except (OSError, ConfigError, yaml.YAMLError):
        return None


def check_streamable(cfg: OnlineConfig, control_mode: str, observation_keys: Sequence[str],
                     policy: str = "") -> list[str]:
    """Warnings for a graph actor of this run; ValueError for a run it cannot act in (module docstring)."""
    lc = cfg.learner
    if lc.algorithm not in STREAMABLE:
        raise ValueError(f"learner.algorithm {lc.algorithm!r}: a graph actor acts in {STREAMABLE} runs")
    if lc.algorithm != "residual":
        return []
    rc = lc.residual
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
    def residual(self) -> ResidualActorWeights | None:
        """The residual acting now."""
        return self.agent.residual

    def _fits(self, weights: ResidualActorWeights) -> str | None:
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


def _misfit(weights: ResidualActorWeights, obs: Mapping[str, np.ndarray], base: np.ndarray) -> str | None:
    """Why a residual cannot act on this stream (None: it can)."""
    if weights.action_dim != base.size:
        return f"{weights.action_dim} action values, the base gives {base.size}"
    wrong = {k: d for k, d in weights.state_dims.items() if k not in obs or np.asarray(obs[k]).size != d}
    return None if not wrong else f"state {wrong} does not fit the observation {sorted(obs)}"

