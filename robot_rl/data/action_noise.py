"""Noise injected into an expert's actions while recording (DART: Laskey et al., CoRL 2017).

Demonstrations of a perfect expert only visit the states the expert visits, so a cloned policy that drifts
off them has never seen how to recover (covariate shift). DART executes the expert's action plus noise
but records the expert's clean action: the expert, deciding from the current state, corrects the drift
the noise caused, and the demonstrations now show those corrections. Wrapping the env does exactly that,
because the recorder stores the action it passed to ``env.step`` (the expert's), while the wrapped env
executes the perturbed one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np


class ActionNoise(gym.ActionWrapper):
    """Gaussian noise of standard deviation ``sigma`` (action units) on the action dimensions ``dims``.

    ``dims`` leaves out e.g. a gripper command, whose noise would open or close the hand at random;
    ``None`` perturbs every dimension. The perturbed action is clipped to the action space. The noise
    generator is re-seeded from the reset seed, so a recorded episode replays exactly.
    """

    def __init__(self, env: gym.Env[Any, Any], sigma: float, dims: Sequence[int] | None = None) -> None:
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"ActionNoise needs a Box action space, got {type(space).__name__}")
        if not np.isfinite(sigma) or sigma < 0:
            raise ValueError(f"sigma: must be finite and >= 0, got {sigma}")
        size = int(np.prod(space.shape))
        chosen = list(range(size)) if dims is None else [int(d) for d in dims]
        if any(d < -size or d >= size for d in chosen):
            raise ValueError(f"dims: {chosen} out of range for a {size}-dimensional action")
        self.sigma = float(sigma)
        self.mask = np.zeros(size, dtype=bool)
        self.mask[chosen] = True
        self.low, self.high = space.low.reshape(-1), space.high.reshape(-1)
        self._rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset the env; a seed also re-seeds the noise (offset, so it differs from the env's own draws)."""
        if seed is not None:
            self._rng = np.random.default_rng([int(seed), 0xDA27])
        return self.env.reset(seed=seed, options=options)

    def action(self, action: np.ndarray) -> np.ndarray:
        """The action to execute: ``action`` plus noise on the chosen dimensions, within the bounds."""
        flat = np.asarray(action, dtype=np.float64).reshape(-1)
        if flat.size != self.mask.size:
            raise ValueError(f"action: expected {self.mask.size} values, got {flat.size}")
        noisy = flat + self.mask * self._rng.normal(0.0, self.sigma, flat.size)
        return np.clip(noisy, self.low, self.high).astype(np.float32).reshape(self.action_space.shape)
