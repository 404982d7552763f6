"""What happens between a controller's command and the actuator: gain, delay, lag and noise.

The physics sees ``ctrl = clip(lag(delay(command)) + noise)``; gains are applied in the model by
:mod:`robot_rl.sim.randomize`. With the nominal settings the command passes through unchanged (clipped
to the ctrl range).

The state (delay ring buffer, lag state) lives in fixed arrays updated in place, so the numpy
:meth:`ActuatorPipeline.__call__` (the reference, used by the Python physics loop) and the compiled
physics loops (:func:`robot_rl.control.kernels.compiled.pipeline_step`, fed by :meth:`kernel_args`)
advance the same pipeline. Noise is drawn from the same generator in the same order either way:
``kernel_args(n)`` draws the n steps' noise at once, which numpy's Generator fills sequentially, so it
equals n draws of one step each.
"""

from __future__ import annotations

import numpy as np


class ActuatorPipeline:
    """Per-physics-step command path; ``reset`` draws nothing, the env passes sampled values."""

    def __init__(self, n: int, ctrl_low: np.ndarray, ctrl_high: np.ndarray, dt: float) -> None:
        self.n = n
        self.low = np.ascontiguousarray(ctrl_low, dtype=np.float64)
        self.high = np.ascontiguousarray(ctrl_high, dtype=np.float64)
        self.dt = dt
        self.delay_steps = 0
        self.time_constant = 0.0
        self.noise_std = 0.0
        self._ring = np.zeros((0, n))
        """Commands in flight: row ``_head`` is the oldest (it leaves next); ``delay_steps`` rows."""
        self._head = np.zeros(1, dtype=np.int64)
        self._state = np.zeros(n)
        self._rng = np.random.default_rng(0)
        self._no_noise = np.zeros((0, n))

    def reset(self, initial: np.ndarray, delay_s: float, time_constant_s: float, noise_std: float,
              rng: np.random.Generator) -> None:
        """Start from ``initial`` commands with the given delay, lag and noise (fraction of range)."""
        self.delay_steps = round(delay_s / self.dt)
        self.time_constant = float(time_constant_s)
        self.noise_std = float(noise_std)
        self._rng = rng
        self._state = np.array(initial, dtype=np.float64)
        self._ring = np.tile(self._state, (self.delay_steps, 1))
        self._head[0] = 0

    @property
    def alpha(self) -> float:
        """Fraction of the gap to the command the lag closes per step (backward Euler); -1: no lag."""
        return self.dt / (self.time_constant + self.dt) if self.time_constant > 0 else -1.0

    def __call__(self, command: np.ndarray) -> np.ndarray:
        """The command that reaches the actuators this physics step, clipped to the ctrl range."""
        c = np.array(command, dtype=np.float64)
        if self.delay_steps:
            h = int(self._head[0])
            c, self._ring[h] = self._ring[h].copy(), c
            self._head[0] = (h + 1) % self.delay_steps
        if self.time_constant > 0:
            self._state[:] = self._state + self.alpha * (c - self._state)
        else:
            self._state[:] = c
        out = self._state
        if self.noise_std > 0:
            out = out + self._rng.normal(0.0, self.noise_std, self.n) * (self.high - self.low)
        return np.minimum(np.maximum(out, self.low), self.high)

    def kernel_args(self, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float,
                                               np.ndarray]:
        """``pipeline_step``'s state for the next ``steps`` steps: low, high, ring, head, lag state, alpha, noise.

        The noise rows (``steps`` x n, already times ``noise_std``; empty without noise) are drawn now.
        """
        noise = (self._rng.normal(0.0, self.noise_std, (steps, self.n)) if self.noise_std > 0 else self._no_noise)
        return self.low, self.high, self._ring, self._head, self._state, self.alpha, noise
