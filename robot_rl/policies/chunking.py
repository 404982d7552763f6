"""Execute action chunks so that consecutive chunks join smoothly.

A policy predicts a chunk of ``horizon`` actions from the observation at step ``k``; entry ``i`` is meant
for step ``k + i``. The executor keeps the recent chunks and, at each step, returns either the
temporal ensemble of every chunk covering that step (ACT-style exponential weights, oldest chunk weighted
most) or a linear cross-fade from the previous chunk to the newest over ``blend_steps``. A new chunk may
arrive while the previous one is still executing and may be late (predicted at an earlier step): entries
for steps already executed are simply skipped. No torch here: the ROS policy node reuses this class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass
class ExecutorConfig:
    """How chunks are turned into one action per control step."""

    mode: Literal["ensemble", "blend", "latest"] = "blend"
    """"ensemble": weighted mean of all chunks covering the step; "blend": cross-fade old -> new chunk;
    "latest": the newest chunk only."""
    n_action_steps: int = 8
    """Steps executed from a chunk before a new one is requested."""
    ensemble_decay: float = 0.1
    """ACT weight exp(-decay * i) of the i-th oldest chunk (ensemble mode); 0 gives a plain mean."""
    blend_steps: int = 4
    """Length of the cross-fade from the previous chunk to the new one (blend mode)."""

    def __post_init__(self) -> None:
        if self.n_action_steps < 1:
            raise ValueError(f"n_action_steps: must be >= 1, got {self.n_action_steps}")
        if not np.isfinite(self.ensemble_decay) or self.ensemble_decay < 0:
            raise ValueError(f"ensemble_decay: must be finite and >= 0, got {self.ensemble_decay}")
        if self.blend_steps < 0:
            raise ValueError(f"blend_steps: must be >= 0, got {self.blend_steps}")


class ChunkExecutor:
    """Turns chunks (horizon, action_dim) into a stream of actions; see the module docstring."""

    def __init__(self, config: ExecutorConfig, action_dim: int) -> None:
        self.config = config
        self.action_dim = action_dim
        self.step = 0
        self._chunks: deque[tuple[int, np.ndarray]] = deque()  # (start step, chunk), oldest first
        self._last_request = -(10**9)

    def reset(self) -> None:
        """Forget every chunk and restart the step counter (new episode)."""
        self.step = 0
        self._chunks.clear()
        self._last_request = -(10**9)

    def needs_chunk(self) -> bool:
        """True when the newest chunk has been executed for ``n_action_steps`` or nothing covers this step."""
        if not self._covering():
            return True
        return self.step - self._last_request >= self.config.n_action_steps

    def add_chunk(self, chunk: np.ndarray, start_step: int | None = None) -> None:
        """Accept a chunk predicted from the observation at ``start_step`` (default: the current step)."""
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or chunk.shape[0] == 0:
            raise ValueError(f"chunk: expected shape (horizon, {self.action_dim}), got {chunk.shape}")
        if not np.all(np.isfinite(chunk)):
            raise ValueError("chunk: contains NaN or inf; rejected (the previous chunk keeps executing)")
        start = self.step if start_step is None else int(start_step)
        if start > self.step:
            raise ValueError(f"start_step: {start} is in the future (current step {self.step})")
        self._chunks.append((start, chunk))
        # counted from the step of the chunk's observation, not from its arrival: a chunk predicted on a
        # thread arrives a step or more later, and counting from then would request the next one late
        # (every n_action_steps + 1 steps on the robot where evaluation requests every n_action_steps)
        self._last_request = start
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= self.step:
            self._chunks.popleft()

    def _covering(self) -> list[tuple[int, np.ndarray]]:
        return [(s, c) for s, c in self._chunks if s <= self.step < s + len(c)]

    def next_action(self) -> np.ndarray:
        """The action for the current step; advances the step counter."""
        covering = self._covering()
        if not covering:
            raise RuntimeError(f"step {self.step}: no chunk covers this step; call add_chunk first")
        mode = self.config.mode
        if mode == "latest" or len(covering) == 1:
            s, c = covering[-1]
            action = c[self.step - s]
        elif mode == "ensemble":
            weights = np.exp(-self.config.ensemble_decay * np.arange(len(covering)))
            values = np.stack([c[self.step - s] for s, c in covering])
            action = (weights[:, None] * values).sum(0) / weights.sum()
        else:
            (s_old, c_old), (s_new, c_new) = covering[-2], covering[-1]
            since = self.step - self._last_request
            alpha = 1.0 if self.config.blend_steps == 0 else min(1.0, (since + 1) / (self.config.blend_steps + 1))
            action = (1 - alpha) * c_old[self.step - s_old] + alpha * c_new[self.step - s_new]
        self.step += 1
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= self.step:
            self._chunks.popleft()
        return np.asarray(action, dtype=np.float32)
