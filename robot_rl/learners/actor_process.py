"""An actor process of online fine-tuning: run episodes with the current weights and a simulated human.

Each actor owns a simulator, a copy of the policy and a simulated human built on the scripted expert.
Transitions stream to the learner every few steps during the episode; between action chunks the actor
checks ``<run>/weights/`` for a newer version and stages it, so the policy improves mid-episode, not
only at resets. If the learner goes away (killed, restarting), the actor keeps running: steps wait in a
bounded queue and go out once it reconnects. One JSON line per episode goes to ``<run>/actor_<i>.jsonl``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

import robot_rl.sim  # noqa: F401  (registers the robot_rl/ environments)
from robot_rl.core.transition import Transition
from robot_rl.data.recorder import to_observation
from robot_rl.learners.learner_process import read_connection
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.reward_classifier import LearnedSuccess, RewardClassifier
from robot_rl.learners.rollout import run_episode
from robot_rl.learners.simulated_human import SimulatedHuman
from robot_rl.learners.task_risk import task_risk
from robot_rl.learners.transport import SocketTransitionClient, WeightsWatcher, list_versions
from robot_rl.policies.base import CheckpointError, Policy
from robot_rl.sim.experts.arm import expert_for

RECONNECT_EVERY_S = 0.5


class ReconnectingSender:
    """A TransitionSender that survives learner restarts: queue while away, flush on reconnect."""

    def __init__(self, run: Path, limit: int) -> None:
        self.run, self.limit = run, limit
        self.queue: deque[Transition] = deque()
        self.dropped = 0
        """Steps dropped because the queue was full while the learner was away."""
        self.reconnects = 0
        self._client: SocketTransitionClient | None = None
        self._next_try = 0.0

    def _connect(self) -> bool:
        if self._client is not None:
            return True
        if time.monotonic() < self._next_try:
            return False
        self._next_try = time.monotonic() + RECONNECT_EVERY_S
        try:
            address, key = read_connection(self.run, timeout=0.0)
            self._client = SocketTransitionClient(address, key)
        except (OSError, EOFError, TimeoutError, ValueError, KeyError):
            return False
        self.reconnects += 1
        return True

    def send(self, transitions: Sequence[Transition]) -> None:
        """Queue, then send everything queued if the learner is reachable."""
        self.queue.extend(transitions)
        while len(self.queue) > self.limit:
            self.queue.popleft()
            self.dropped += 1
        if not self.queue or not self._connect():
            return
        batch = list(self.queue)
        try:
            assert self._client is not None
            self._client.send(batch)
        except (OSError, EOFError):
            self._client = None  # learner gone; keep the batch for later
            return
        self.queue.clear()

    def flush(self, timeout: float) -> bool:
        """Try to deliver what is queued for up to ``timeout`` seconds; True when nothing is left."""
        deadline = time.monotonic() + timeout
        while self.queue and time.monotonic() < deadline:
            self.send([])
            time.sleep(0.05)
        return not self.queue

    def close(self) -> None:
        """Disconnect."""
        if self._client is not None:
            self._client.close()
            self._client = None


def _latest_policy(weights: Path, timeout: float = 120.0) -> tuple[Policy, int]:
    deadline = time.monotonic() + timeout
    while True:
        versions = list_versions(weights)
        if versions:
            version, folder = versions[-1]
            try:
                return Policy.load(folder), version
            except (CheckpointError, FileNotFoundError):  # pruned between listing and loading
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{weights}: no published weights within {timeout:.0f} s")
        time.sleep(0.1)


def run_actor(cfg: OnlineConfig, run: str | Path, index: int = 0, progress: bool = False) -> list[dict[str, Any]]:
    """Run ``cfg.actor.episodes`` episodes as actor ``index``; returns (and logs) one record per episode."""
    ac = cfg.actor
    run = Path(run)
    torch.set_num_threads(ac.num_threads)
    env = gym.make(ac.env_id, **ac.env_options)
    if ac.success_detector:
        env = LearnedSuccess(env, RewardClassifier.load(ac.success_detector))
    expert = expert_for(env)
    human_cfg = dataclasses.replace(ac.human, seed=ac.human.seed + index, action_risk=ac.human_risk == "action")
    human = SimulatedHuman(expert, human_cfg, state_risk=task_risk(ac.env_id) if ac.human_risk == "grasp" else None)
    policy, version = _latest_policy(run / "weights")
    watcher = WeightsWatcher(run / "weights", current=version)
    sender = ReconnectingSender(run, ac.pending_limit)
    log = run / f"actor_{index}.jsonl"
    records: list[dict[str, Any]] = []

    def between_chunks() -> None:
        found = watcher.poll()
        if found is not None:
            # staged, applied at the next chunk; a pruned or refused folder leaves the current weights acting
            with contextlib.suppress(CheckpointError, FileNotFoundError):
                policy.load_weights(found[1], version=found[0])

    def act(obs: Any) -> np.ndarray:
        return policy.select_action(to_observation(obs))

    try:
        for k in tqdm(range(ac.episodes), desc=f"actor {index}", disable=not progress):
            seed = ac.seed + 100_000 * index + k
            policy.reset()
            t0 = time.perf_counter()
            start_version = policy.version
            out = run_episode(env, act, episode_id=1_000_000 * index + k, human=human,
                              policy_version=lambda: policy.version, sender=sender, send_every=ac.send_every,
                              seed=seed, between_chunks=between_chunks)
            record = {"actor": index, "episode": k, "seed": seed, "success": out.success,
                      "steps": len(out.transitions), "intervention_steps": out.intervention_steps,
                      "takeovers": out.takeovers, "version_start": start_version, "version_end": policy.version,
                      "seconds": time.perf_counter() - t0, "t": time.time(), "queued": len(sender.queue)}
            records.append(record)
            with log.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        sender.flush(timeout=30.0)
    finally:
        sender.close()
        env.close()
    return records
