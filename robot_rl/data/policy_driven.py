"""Demonstrations on the learner's own states: its policy drives, the expert labels (DAgger).

A cloned policy drifts into states its demonstrations never showed and has not seen how to come back
(covariate shift). DAgger (Ross, Gordon and Bagnell, AISTATS 2011) records where the *policy* goes while
storing what the *expert* would have done there, and trains on the union. Wrapping the env does exactly
that, as :class:`robot_rl.data.action_noise.ActionNoise` does for DART: the recorder stores the action it
passed to ``env.step`` (the expert's, computed from the privileged state), while the wrapped env executes
the policy's. ``beta`` is DAgger's mixing: the share of steps on which the expert's own action is executed.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.runtime.episode import instruct_agent
from robot_rl.runtime.policy_runner import PolicyRunner


class PolicyDriven(gym.Wrapper[Any, Any, Any, Any]):
    """Executes ``runner``'s action instead of the one passed to :meth:`step` (on ``1 - beta`` of the steps).

    The runner sees every observation (its history and chunks stay in step with the episode) and is reset
    with the episode's seed, so a recorded episode replays exactly. ``info["executed_action"]`` is what ran.
    """

    def __init__(self, env: gym.Env[Any, Any], runner: PolicyRunner, beta: float = 0.0) -> None:
        super().__init__(env)
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta: must be in [0, 1], got {beta}")
        self.runner, self.beta = runner, float(beta)
        self.policy_steps = 0
        """Steps on which the policy's action was executed."""
        self._obs: Any = None
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset the env and the runner (the seed fixes the policy's noise and the mixing draws)."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.runner.reset(seed=seed)
        instruct_agent(self.runner, self.env)
        if seed is not None:
            self._rng = np.random.default_rng([int(seed), 0xDA66])
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> Any:
        """Step with the policy's action (or, with probability ``beta``, ``action`` itself)."""
        if self._obs is None:
            raise RuntimeError("step() before reset()")
        executed = self.runner.act(self._obs)  # every step, so the runner's history stays in step
        if self._rng.random() < self.beta:
            executed = np.asarray(action, np.float32)
        else:
            self.policy_steps += 1
        obs, reward, terminated, truncated, info = self.env.step(executed)
        self._obs = obs
        return obs, reward, terminated, truncated, {**info, "executed_action": executed}
