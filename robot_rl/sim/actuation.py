"""What happens between a controller's command and the actuator: gain, delay, lag and noise.

The physics sees ``ctrl = lag(delay(command)) + noise``; gains are applied in the model by
:mod:`robot_rl.sim.randomize`. With the nominal settings the command passes through unchanged.
"""

from __future__ import annotations

import collections

import numpy as np


class ActuatorPipeline:
    """Per-physics-step command path; ``reset`` draws nothing, the env passes sampled values."""

    def __init__(self, n: int, ctrl_low: np.ndarray, ctrl_high: np.ndarray, dt: float) -> None:
        self.n = n
        self.low = np.asarray(ctrl_low, dtype=np.float64)
        self.high = np.asarray(ctrl_high, dtype=np.float64)
        self.dt = dt
        self.delay_steps = 0
        self.time_constant = 0.0
        self.noise_std = 0.0
        self._queue: collections.deque[np.ndarray] = collections.deque()
        self._state = np.zeros(n)
        self._rng = np.random.default_rng(0)

    def reset(self, initial: np.ndarray, delay_s: float, time_constant_s: float, noise_std: float,
              rng: np.random.Generator) -> None:
        """Start from ``initial`` commands with the given delay, lag and noise (fraction of range)."""
        self.delay_steps = round(delay_s / self.dt)
        self.time_constant = float(time_constant_s)
        self.noise_std = float(noise_std)
        self._rng = rng
        self._state = np.array(initial, dtype=np.float64)
        self._queue = collections.deque([self._state.copy() for _ in range(self.delay_steps)])

    def __call__(self, command: np.ndarray) -> np.ndarray:
        """The command that reaches the actuators this physics step, clipped to the ctrl range."""
        if self.delay_steps:
            self._queue.append(np.array(command, dtype=np.float64))
            command = self._queue.popleft()
        if self.time_constant > 0:
            alpha = self.dt / (self.time_constant + self.dt)
            self._state = self._state + alpha * (command - self._state)
        else:
            self._state = np.asarray(command, dtype=np.float64)
        out = self._state
        if self.noise_std > 0:
            out = out + self._rng.normal(0.0, self.noise_std, self.n) * (self.high - self.low)
        return np.minimum(np.maximum(out, self.low), self.high)
