"""Record episodes from any gymnasium env driven by an expert (scripted or a human at the keyboard).

The recorder needs no ROS: it steps the env, turns each step into a :class:`Transition` and appends it
to an :class:`EpisodeStore`. Observations may be a dict of arrays (kept as fields; float64 is stored
as float32, scalars as shape (1,)) or a single array (stored as field ``state``). An episode that
raises mid-way (NaN from the sim, a bad action shape, an operator abort) is discarded from disk, the
episodes before it stay, and the error names the episode and field. The expert may be a callable
``obs -> action`` or an object with ``act(obs)``; experts with ``reset()`` are reset per episode, and
an expert may set ``is_human`` (its steps are stored as human interventions), ``wants_rerecord`` (the
take is discarded and recorded again), ``episode_done`` with ``outcome`` (the human ends the episode
and says whether it succeeded) and ``stop_requested`` (end the session).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.store import EpisodeStore


@dataclass
class RecordReport:
    """What a recording session produced."""

    episodes: list[int] = field(default_factory=list)
    """Store index of every committed episode."""
    lengths: list[int] = field(default_factory=list)
    """Steps of every committed episode."""
    successes: list[bool | None] = field(default_factory=list)
    """info['success'] (or 'is_success') at the end of each episode; None when the env does not say."""
    rerecorded: int = 0
    """Takes thrown away because the expert asked to re-record."""
    seconds: float = 0.0
    """Wall-clock time of the session."""

    @property
    def success_rate(self) -> float | None:
        """Fraction of known outcomes that succeeded."""
        known = [s for s in self.successes if s is not None]
        return sum(known) / len(known) if known else None


def to_observation(obs: Any) -> dict[str, np.ndarray]:
    """A gymnasium observation as a dict of arrays (float64 -> float32, scalars -> shape (1,))."""
    items = obs.items() if isinstance(obs, Mapping) else [("state", obs)]
    out = {}
    for key, value in items:
        arr = np.asarray(value)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        out[str(key)] = arr.reshape(1) if arr.ndim == 0 else arr
    return out


def expert_action(expert: Any, obs: Any) -> np.ndarray:
    """Call ``expert.act(obs)`` or ``expert(obs)`` and return a float32 vector."""
    act: Callable[[Any], Any] = expert.act if hasattr(expert, "act") else expert
    return np.asarray(act(obs), dtype=np.float32).reshape(-1)


def record(env: gym.Env, expert: Any, store: EpisodeStore, episodes: int, max_steps: int | None = None,
           seed: int = 0, task: str | None = None, progress: bool = True, max_retakes: int = 3) -> RecordReport:
    """Record ``episodes`` committed episodes of ``expert`` acting in ``env`` into ``store``."""
    if episodes < 1:
        raise ValueError(f"episodes: must be >= 1, got {episodes}")
    report = RecordReport()
    start = time.perf_counter()
    fps = float(store.info.fps)
    bar = tqdm(total=episodes, desc="record", unit="episode", disable=not progress)
    retakes = 0
    try:
        while len(report.episodes) < episodes:
            ep_seed = seed + len(report.episodes) + report.rerecorded
            length, success, rerecord = _record_one(env, expert, store, ep_seed, max_steps, task, fps)
            if rerecord and retakes < max_retakes:
                report.rerecorded += 1
                retakes += 1
                continue
            retakes = 0
            report.episodes.append(store.num_episodes - 1)
            report.lengths.append(length)
            report.successes.append(success)
            bar.update(1)
            bar.set_postfix(success=report.success_rate)
            if getattr(expert, "stop_requested", False):
                break
    finally:
        bar.close()
    report.seconds = time.perf_counter() - start
    return report


def _record_one(env: gym.Env, expert: Any, store: EpisodeStore, seed: int, max_steps: int | None,
                task: str | None, fps: float) -> tuple[int, bool | None, bool]:
    """One take; returns (steps, success, discarded-for-rerecord)."""
    raw_obs, info = env.reset(seed=seed)
    if hasattr(expert, "reset"):
        expert.reset()
    human = bool(getattr(expert, "is_human", False))
    source = SegmentSource.HUMAN if human else SegmentSource.SCRIPTED
    writer = store.begin_episode(task=task)
    step = 0
    try:
        obs = to_observation(raw_obs)
        while True:
            action = expert_action(expert, raw_obs)
            if getattr(expert, "wants_rerecord", False):
                writer.discard()
                return step, None, True
            ended = bool(getattr(expert, "episode_done", False))
            raw_next, reward, terminated, truncated, info = env.step(action)
            nxt = to_observation(raw_next)
            cut = (max_steps is not None and step + 1 >= max_steps) or ended
            writer.add(Transition(
                observation=obs, next_observation=nxt, action=action, reward=float(reward),
                terminated=bool(terminated), truncated=bool(truncated) or (cut and not terminated),
                episode_id=writer.episode_id, step=step, is_intervention=human, segment_source=source,
                obs_stamp=step / fps, next_obs_stamp=(step + 1) / fps,
            ))
            step += 1
            if terminated or truncated or cut:
                break
            obs, raw_obs = nxt, raw_next
        success = getattr(expert, "outcome", None)
        if success is None:
            success = info.get("success", info.get("is_success"))
        success = None if success is None else bool(success)
        writer.commit(success=success)
        return step, success, False
    except SpecError as exc:
        writer.discard()
        where = "" if str(exc).startswith("episode") else f"episode {writer.index}, step {step}, field "
        raise SpecError(f"{where}{exc} (the partial episode was discarded)") from exc
    except BaseException:
        writer.discard()
        raise
