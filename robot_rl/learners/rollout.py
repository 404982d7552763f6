"""One supervised episode on a Gymnasium env -> correctly labelled Transitions, streamed as they happen.

The actor side of online fine-tuning: the policy proposes, the (simulated) human may take over, and
every step becomes a :class:`~robot_rl.core.transition.Transition` with who acted (``segment_source``,
``is_intervention``), a new ``segment_id`` whenever control changes hands, the policy's proposal, the
base policy's action (residual RL) and the weights version. Steps go to the learner every
``send_every`` steps through any :class:`~robot_rl.learners.transport.TransitionSender`, not as a whole
episode at the end; ``between_chunks`` is called before every step so an actor can swap in new weights
mid-episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.simulated_human import SimulatedHuman
from robot_rl.learners.transport import TransitionSender

PolicyFn = Callable[[Mapping[str, np.ndarray]], np.ndarray]


@dataclass(frozen=True)
class EpisodeResult:
    """What one episode produced."""

    transitions: list[Transition]
    """Every step, labelled."""
    success: bool
    """The env reported ``is_success`` at some step (as robot_rl.training.evaluate counts it)."""
    intervention_steps: int
    """Steps the human controlled."""
    takeovers: int
    """Times the human took control."""


def run_episode(env: Any, policy: PolicyFn, episode_id: int, human: SimulatedHuman | None = None,
                base_policy: PolicyFn | None = None, policy_version: Callable[[], int] = lambda: -1,
                sender: TransitionSender | None = None, send_every: int = 5, seed: int | None = None,
                between_chunks: Callable[[], None] | None = None, dt: float = 0.1) -> EpisodeResult:
    """Run one episode; see the module docstring. ``policy`` gets the observation, returns an action."""
    if send_every < 1:
        raise ValueError(f"send_every: must be >= 1, got {send_every}")
    obs, _ = env.reset(seed=seed)
    if human is not None:
        human.reset()
    out: list[Transition] = []
    pending: list[Transition] = []
    segment, last_source, takeovers, success = 0, None, 0, False
    for step in range(10**9):
        if between_chunks is not None:
            between_chunks()
        proposal = np.asarray(policy(obs), dtype=np.float32)
        base = None if base_policy is None else np.asarray(base_policy(obs), dtype=np.float32)
        action, source = proposal, SegmentSource.POLICY
        if human is not None:
            decision = human.step(obs, proposal)
            if decision.intervening:
                action, source = decision.action, SegmentSource.HUMAN
        if last_source is not None and source != last_source:
            segment += 1
            takeovers += int(source is SegmentSource.HUMAN)
        elif last_source is None and source is SegmentSource.HUMAN:
            takeovers += 1
        last_source = source
        nxt, reward, terminated, truncated, info = env.step(action)
        success = success or bool(info.get("is_success", False))
        proposal_ok = bool(np.all(np.isfinite(proposal)))
        t = Transition(
            observation={k: np.asarray(v) for k, v in obs.items()},
            next_observation={k: np.asarray(v) for k, v in nxt.items()},
            action=np.asarray(action, np.float32), reward=float(reward), terminated=bool(terminated),
            truncated=bool(truncated) and not terminated, episode_id=episode_id, step=step,
            policy_action=proposal if proposal_ok else None, base_action=base,
            is_intervention=source is SegmentSource.HUMAN, segment_source=source, segment_id=segment,
            policy_version=int(policy_version()), obs_stamp=step * dt, next_obs_stamp=(step + 1) * dt)
        out.append(t)
        pending.append(t)
        if sender is not None and len(pending) >= send_every:
            sender.send(pending)
            pending = []
        obs = nxt
        if terminated or truncated:
            break
    if sender is not None and pending:
        sender.send(pending)
    return EpisodeResult(out, success, sum(t.is_intervention for t in out), takeovers)
