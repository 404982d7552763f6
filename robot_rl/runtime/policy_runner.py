"""The one policy runner: observation history, chunk execution and weight hot-swap, in sync or on a thread.

A chunked policy (:class:`robot_rl.policies.base.Policy`) only maps an observation history to a chunk of
actions. Running it on a robot or in an env needs more, the same everywhere:

* an observation history of ``n_obs_steps`` frames (the first frame repeated at an episode start);
* a :class:`~robot_rl.policies.chunking.ChunkExecutor` that turns chunks into one action per step and
  joins consecutive chunks smoothly;
* the device it computes on (``device="auto"``: CUDA when present), observations and actions staying numpy;
* optionally, the starting noise of each chunk from a ``noise_source`` (DSRL steers a frozen policy this
  way, robot_rl.learners.algorithms.dsrl_online); None from it, or no source, means the policy's own Gaussian draw;
* new weights from a learner's ``weights/v<N>/`` folder (:class:`~robot_rl.runtime.weights.WeightsWatcher`),
  checked when found and applied only between chunks, so a chunk never mixes two versions; a refused
  folder leaves the running weights acting and is not retried.

Synchronous use (evaluation, actors): :meth:`PolicyRunner.act` predicts a chunk when one is due and returns
the next action. Threaded use (a ROS node whose timer must never wait for the network):
:meth:`PolicyRunner.step` records the frame, wakes the inference thread when a chunk is due and returns the
action for this step, or None while the first chunk is still being computed (the caller holds). A chunk
that arrives late is predicted from an older frame; the executor skips the entries already due.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.core.device import resolve_device
from robot_rl.core.spaces import SpecError
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.policies.chunking import ChunkExecutor
from robot_rl.runtime.weights import WeightsWatcher


class PolicyRunner:
    """Runs a :class:`Policy` step by step; see the module docstring."""

    def __init__(self, policy: Policy, weights_dir: str | Path | None = None, num_steps: int | None = None,
                 threaded: bool = False, on_swap: Callable[[int], None] | None = None,
                 on_error: Callable[[str], None] | None = None, device: str | None = None,
                 noise_source: Callable[[Mapping[str, np.ndarray]], Any] | None = None,
                 instruction: str | None = None) -> None:
        if device is not None:  # "auto" | "cpu" | "cuda[:i]"; None leaves the policy where it is
            policy.to(resolve_device(device))
        self.policy = policy
        self.keys = [*policy.state_keys, *policy.image_keys]
        self.num_steps = num_steps
        self.executor = ChunkExecutor(policy.config.executor, policy.spec.action_dim)
        self.history: deque[dict[str, np.ndarray]] = deque(maxlen=policy.config.n_obs_steps)
        self.watcher = None if not weights_dir else WeightsWatcher(weights_dir, current=policy.version)
        self.on_swap, self.on_error = on_swap, on_error
        self.noise_source = noise_source
        """(observation history {key: (To, ...)}) -> the chunk's starting noise (H, A), or None for a random draw."""
        self.refused: dict[int, str] = {}
        """Versions whose checkpoint was refused, with the reason."""
        self.chunks = 0
        """Chunks predicted so far."""
        self.late_steps = 0
        """Steps (threaded mode) for which no chunk was ready."""
        self.inference_s = 0.0
        """Time spent predicting chunks [s]."""
        self.generator: torch.Generator | None = None
        self.instruction: str | None = instruction
        """This episode's instruction for a language-conditioned policy (None: the policy's own ``task``)."""
        self.fixed_instruction = instruction is not None
        """An instruction given here is kept: the episodes' own (:meth:`instruct`) are then ignored."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._frame_step = 0
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        if threaded:
            self._worker = threading.Thread(target=self._infer_loop, name="policy-inference", daemon=True)
            self._worker.start()

    @property
    def version(self) -> int:
        """Version of the weights acting now."""
        return self.policy.version

    # --- episodes ---------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """New episode: forget history and chunks, apply staged weights; ``seed`` fixes the sampling noise."""
        with self._lock:
            self.history.clear()
            self.executor.reset()
        self.generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        self._apply_staged()

    def instruct(self, text: str) -> None:
        """Act on ``text`` as the task instruction from now on (the episode loop calls it after each reset).

        A runner built with a fixed ``instruction`` keeps that one.
        """
        if not self.fixed_instruction:
            self.instruction = text

    def frame(self, obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The keys this policy reads from one observation, checked for presence."""
        missing = [k for k in self.keys if k not in obs]
        if missing:
            raise SpecError(f"observation: missing key(s) {missing} (policy needs {self.keys})")
        return {k: np.asarray(obs[k]) for k in self.keys}

    def _push(self, frame: dict[str, np.ndarray]) -> None:
        if not self.history:
            self.history.extend([frame] * self.policy.config.n_obs_steps)
        else:
            self.history.append(frame)

    def _stacked(self) -> dict[str, np.ndarray]:
        return {k: np.stack([h[k] for h in self.history]) for k in self.keys}

    def _predict(self, stacked: Mapping[str, np.ndarray]) -> np.ndarray:
        t0 = time.perf_counter()
        noise = None if self.noise_source is None else self.noise_source(stacked)
        chunk = self.policy.predict_chunk(stacked, num_steps=self.num_steps, generator=self.generator, noise=noise,
                                           task=self.instruction)
        self.inference_s += time.perf_counter() - t0
        self.chunks += 1
        return chunk

    # --- synchronous ------------------------------------------------------------------------------------
    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        """The action for this step (predicts a chunk first when one is due; weights swap only then)."""
        if self._worker is not None:
            raise RuntimeError("act() on a threaded runner: use step()")
        self._push(self.frame(obs))
        if self.executor.needs_chunk():
            self.poll_weights()
            self._apply_staged()
            self.executor.add_chunk(self._predict(self._stacked()))
        return self.executor.next_action()

    __call__ = act

    # --- threaded ---------------------------------------------------------------------------------------
    def step(self, obs: Mapping[str, Any]) -> np.ndarray | None:
        """Threaded mode: record the frame, request a chunk when due, return this step's action or None."""
        frame = self.frame(obs)
        with self._lock:
            self._frame_step = self.executor.step
            self._push(frame)
            if self.executor.needs_chunk():
                self._wake.set()
            try:
                return self.executor.next_action()
            except RuntimeError:  # no chunk covers this step yet (inference is late): the caller holds
                self.late_steps += 1
                return None

    def _infer_loop(self) -> None:
        while not self._stop.is_set():
            if not self._wake.wait(timeout=0.2):
                continue
            self._wake.clear()
            with self._lock:
                if not self.history:
                    continue
                start = self._frame_step  # the chunk is meant to start at the step of its newest frame
                stacked = self._stacked()
            self._apply_staged()
            try:
                chunk = self._predict(stacked)
                with self._lock:
                    self.executor.add_chunk(chunk, start_step=start)
                    self._wake.clear()  # requests made while predicting are served by this chunk
            except (ValueError, SpecError) as exc:
                self._report(f"chunk rejected: {exc}")

    def close(self) -> None:
        """Stop the inference thread (threaded mode)."""
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join(timeout=5.0)

    # --- weights ----------------------------------------------------------------------------------------
    def poll_weights(self) -> int | None:
        """Stage the newest published version if there is one; returns it (applied between chunks)."""
        if self.watcher is None:
            return None
        found = self.watcher.poll()
        if found is None:
            return None
        version, folder = found
        try:
            return self.policy.load_weights(folder, version=version)
        except (CheckpointError, OSError, ValueError) as exc:  # pruned, half-copied or mismatched
            self.refused[version] = str(exc)
            self._report(f"refused weights v{version} ({folder}): {exc}; keeping v{self.policy.version}")
            return None

    def _apply_staged(self) -> None:
        before = self.policy.version
        self.policy.apply_staged_weights()
        if self.policy.version != before and self.on_swap is not None:
            self.on_swap(self.policy.version)

    def _report(self, message: str) -> None:
        if self.on_error is not None:
            self.on_error(message)
