"""Record episodes from any gymnasium env driven by an expert (scripted or a human at the keyboard).

The recorder needs no ROS: it drives the runtime's episode loop (:func:`robot_rl.runtime.episode.run_episode`,
whose success definition it shares) and appends each labelled step to an :class:`EpisodeStore`.
Each episode is stored with ``task`` or, when that is None and the env has one, the env's instruction of
that episode (:func:`env_instruction`: a multi-task env draws a task per episode), else the store's task.
Observations may be a dict of arrays (kept as fields; float64 is stored as float32, scalars as shape
(1,)) or a single array (stored as field ``state``). An episode that
raises mid-way (NaN from the sim, a bad action shape, an operator abort) is discarded from disk, the
episodes before it stay, and the error names the episode and field. The expert may be a callable
``obs -> action`` or an object with ``act(obs)``; experts with ``reset()`` are reset per episode, and
an expert may set ``is_human`` (its steps are stored as human interventions), ``wants_rerecord`` (the
take is discarded and recorded again), ``episode_done`` with ``outcome`` (the human ends the episode
and says whether it succeeded) and ``stop_requested`` (end the session).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from tqdm import tqdm

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource
from robot_rl.data.store import EpisodeStore
from robot_rl.runtime.episode import EpisodeHooks, env_instruction, run_episode


@dataclass
class RecordReport:
    """What a recording session produced."""

    episodes: list[int] = field(default_factory=list)
    """Store index of every committed episode."""
    lengths: list[int] = field(default_factory=list)
    """Steps of every committed episode."""
    successes: list[bool | None] = field(default_factory=list)
    """The runtime's success of each episode (the operator's verdict, else ``is_success`` at any step);
    None when neither says."""
    rerecorded: int = 0
    """Takes thrown away because the expert asked to re-record."""
    seconds: float = 0.0
    """Wall-clock time of the session."""

    @property
    def success_rate(self) -> float | None:
        """Fraction of known outcomes that succeeded."""
        known = [s for s in self.successes if s is not None]
        return sum(known) / len(known) if known else None


def record(env: gym.Env, expert: Any, store: EpisodeStore, episodes: int, max_steps: int | None = None,
           seed: int = 0, task: str | None = None, progress: bool = True, max_retakes: int = 3,
           steps_after_success: int | None = None) -> RecordReport:
    """Record ``episodes`` committed episodes of ``expert`` acting in ``env`` into ``store``.

    ``steps_after_success``: end each take that many steps after the env first reports success (None: at the
    time limit), so the demonstrations are the task and a short settle, not mostly a long hold.
    """
    if episodes < 1:
        raise ValueError(f"episodes: must be >= 1, got {episodes}")
    if steps_after_success is not None and steps_after_success < 0:
        raise ValueError(f"steps_after_success: must be >= 0, got {steps_after_success}")
    report = RecordReport()
    start = time.perf_counter()
    fps = float(store.info.fps)
    bar = tqdm(total=episodes, desc="record", unit="episode", disable=not progress)
    retakes = 0
    try:
        while len(report.episodes) < episodes:
            ep_seed = seed + len(report.episodes) + report.rerecorded
            length, success, rerecord = _record_one(env, expert, store, ep_seed, max_steps, task, fps,
                                                    steps_after_success)
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
                task: str | None, fps: float, steps_after_success: int | None = None) -> tuple[int, bool | None, bool]:
    """One take; returns (steps, success, discarded-for-rerecord)."""
    human = bool(getattr(expert, "is_human", False))
    writer = store.begin_episode(task=task)
    added = [0]

    def add(t: Any) -> None:
        writer.add(t)
        added[0] += 1

    hooks = EpisodeHooks(on_transition=add, abort=lambda: bool(getattr(expert, "wants_rerecord", False)),
                         done=lambda: bool(getattr(expert, "episode_done", False)))
    try:
        result = run_episode(env, expert, writer.episode_id, seed=seed, hooks=hooks, max_steps=max_steps,
                             source=SegmentSource.HUMAN if human else SegmentSource.SCRIPTED, dt=1.0 / fps,
                             steps_after_success=steps_after_success)
    except SpecError as exc:
        writer.discard()
        where = "" if str(exc).startswith("episode") else f"episode {writer.index}, step {added[0]}, field "
        raise SpecError(f"{where}{exc} (the partial episode was discarded)") from exc
    except BaseException:
        writer.discard()
        raise
    if result.aborted:
        writer.discard()
        return result.length, None, True
    instruction = env_instruction(env) if task is None else None
    if instruction:  # known only after the reset: a multi-task env draws it per episode
        writer.task = instruction
    writer.commit(success=result.success)
    return result.length, result.success, False
