"""Evaluate an exported policy: one episode per vector env, all run together, the policy's mean action.

What is evaluated is the checkpoint itself (a :class:`~robot_rl.policies.base.Policy` with its normaliser),
not the training networks, so the numbers are those of what ``robot-rl eval`` and the ROS node run.
An episode succeeds when the env reports ``is_success`` at its LAST step (the task is held at the end,
not just passed through); it crashed when it terminated without success. ``error_keys`` adds the
distance between two observation keys (a quadrotor's position and goal) at the last step and averaged
over the episode (the tracking error of a moving goal).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.policies.base import Policy
from robot_rl.rl.envs import EnvSpec, final_infos

MAX_EVAL_STEPS = 100_000
"""Guard against an env that never ends its episodes."""


@dataclass
class EvalResult:
    """Per-episode outcomes of one evaluation, at a point of training."""

    steps: int = 0
    """Env steps of training when the policy was exported."""
    wall_s: float = 0.0
    """Wall time of the run when this evaluation finished [s]."""
    success: list[bool] = field(default_factory=list)
    """``is_success`` at the episode's last step."""
    crashed: list[bool] = field(default_factory=list)
    """Terminated without success."""
    final_error: list[float] = field(default_factory=list)
    """Distance between the ``error_keys`` at the last step (NaN without error keys)."""
    episode_error: list[float] = field(default_factory=list)
    """Distance between the ``error_keys`` averaged over the episode's steps (tracking error)."""
    returns: list[float] = field(default_factory=list)
    """Sum of the env's rewards."""
    lengths: list[int] = field(default_factory=list)
    """Steps of each episode."""

    @property
    def success_rate(self) -> float:
        """Fraction of episodes that succeeded."""
        return float(np.mean(self.success)) if self.success else 0.0

    @property
    def crash_rate(self) -> float:
        """Fraction of episodes that crashed."""
        return float(np.mean(self.crashed)) if self.crashed else 0.0

    @property
    def error_mean(self) -> float:
        """Mean final error (NaN when not measured)."""
        return float(np.mean(self.final_error)) if self.final_error else math.nan

    @property
    def error_max(self) -> float:
        """Largest final error (NaN when not measured)."""
        return float(np.max(self.final_error)) if self.final_error else math.nan

    @property
    def tracking_error(self) -> float:
        """Mean over episodes of the per-episode mean error (NaN when not measured)."""
        return float(np.mean(self.episode_error)) if self.episode_error else math.nan

    def to_json(self) -> dict[str, Any]:
        """Everything, plus the aggregates."""
        return {**asdict(self), "success_rate": self.success_rate, "crash_rate": self.crash_rate,
                "error_mean": self.error_mean, "error_max": self.error_max, "tracking_error": self.tracking_error,
                "return_mean": float(np.mean(self.returns)) if self.returns else math.nan,
                "length_mean": float(np.mean(self.lengths)) if self.lengths else math.nan}

    def summary(self) -> str:
        """One line for the terminal."""
        n = len(self.success)
        err = "" if math.isnan(self.error_mean) else (f", final error mean {100 * self.error_mean:.1f} cm, "
                                                       f"max {100 * self.error_max:.1f} cm, over the episodes "
                                                       f"{100 * self.tracking_error:.1f} cm")
        return (f"{sum(self.success)}/{n} succeed at the end, {sum(self.crashed)}/{n} crash{err}, "
                f"{np.mean(self.lengths):.0f} steps on average (after {self.steps} env steps, {self.wall_s:.1f} s)")


def evaluate_policy(policy: Policy, env: gym.vector.VectorEnv, spec: EnvSpec, seed: int,
                    error_keys: tuple[str, str] | None = None) -> EvalResult:
    """Run the first episode of every env of ``env`` (reset with ``seed + i``) with ``policy``."""
    n = env.num_envs
    obs, _ = env.reset(seed=seed)
    done = np.zeros(n, dtype=bool)
    result = EvalResult(success=[False] * n, crashed=[False] * n, final_error=[math.nan] * n,
                        episode_error=[0.0] * n, returns=[0.0] * n, lengths=[0] * n)
    for _ in range(MAX_EVAL_STEPS):
        batch = ({k: np.asarray(obs[k])[:, None] for k in spec.keys} if isinstance(obs, dict)
                 else {"state": np.asarray(obs)[:, None]})
        action = policy.predict_chunk(batch)[:, 0]
        obs, reward, terminated, truncated, info = env.step(action)
        ended = (np.asarray(terminated) | np.asarray(truncated)) & ~done
        success = final_infos(info, "is_success", n)
        error = (np.linalg.norm(np.asarray(obs[error_keys[0]], np.float64) - np.asarray(obs[error_keys[1]], np.float64),
                                axis=1) if error_keys is not None and isinstance(obs, dict) else np.full(n, math.nan))
        for i in np.flatnonzero(~done):
            result.returns[i] += float(reward[i])
            result.lengths[i] += 1
            result.episode_error[i] += float(error[i])
        for i in np.flatnonzero(ended):
            result.success[i] = bool(success[i])
            result.crashed[i] = bool(terminated[i]) and not result.success[i]
            result.final_error[i] = float(error[i])
            result.episode_error[i] /= result.lengths[i]
        done |= ended
        if done.all():
            break
    if error_keys is None:
        result.final_error, result.episode_error = [], []
    return result

