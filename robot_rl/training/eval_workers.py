"""The episodes of one evaluation spread over processes, merged into the report one process gives.

Every episode of :func:`robot_rl.training.evaluate.evaluate` stands alone: the env is reset with the episode's
seed and the agent's sampling noise is seeded with it too (``PolicyRunner.reset(seed=...)``), so which process
runs an episode, and after which other episode, changes nothing in it. :func:`run_parallel` starts
``workers - 1`` processes (spawn: each imports what it needs afresh) that build their env with
``gymnasium.make(recipe.env_id, **recipe.env_options)`` and their agent with ``recipe.agent(env)``; they and
the calling process (with the env and agent it already holds, so nothing waits for the others to start) take
the next episode number from a shared counter until none is left. The outcomes come back sorted by episode:
the same report as the sequential loop, only its wall time differs.
"""

from __future__ import annotations

import queue
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.policies.base import Policy
from robot_rl.runtime.episode import EpisodeResult, act, reset_agent, run_episode

POLL_S = 0.5
"""How often the caller, done with its own episodes, checks that the workers still live [s]."""
JOIN_S = 120.0
"""How long a worker gets to start (imports, env, agent), close its env and exit once the episodes are done [s]."""


@dataclass(frozen=True)
class EvalRecipe:
    """What a worker process of an evaluation builds its env and agent from: picklable, no env or network in it."""

    env_id: str
    """``gymnasium.make``'s env id."""
    agent: Callable[[Any], Any]
    """(the worker's env) -> the agent (a :class:`Policy` or anything with ``act``); a module-level function or a
    ``functools.partial`` of one, e.g. ``partial(policy_from_folder, path)``."""
    env_options: dict[str, Any] = field(default_factory=dict)
    """``gymnasium.make``'s keyword arguments."""
    threads: int = 1
    """Torch CPU threads of each worker (as many as the caller's for the same arithmetic)."""


def policy_from_folder(folder: str | Path, env: Any = None) -> Policy:
    """The policy checkpoint in ``folder`` (an :attr:`EvalRecipe.agent`)."""
    return Policy.load(str(folder))


@dataclass
class EpisodeOutcome:
    """What an evaluation keeps of one episode (a worker process sends it back)."""

    index: int
    """Episode number (its reset seed is the evaluation's first seed + index)."""
    success: bool
    failed: bool
    episode_return: float
    length: int
    metric: float
    """The task metric (NaN: failed, or no metric)."""
    policy_s: float
    """Time spent in the agent [s]."""
    calls: int
    """Agent calls (steps)."""


def episode_outcome(env: Any, timed: TimedAgent, index: int, seed: int, max_steps: int | None,
                    metric: Callable[[EpisodeResult], float] | None) -> EpisodeOutcome:
    """Episode ``index`` of an evaluation (reset seed ``seed + index``) with the timed agent."""
    s0, c0 = timed.seconds, timed.calls
    result = run_episode(env, timed, seed=seed + index, max_steps=max_steps, keep=metric is not None)
    failed = bool(result.terminated)
    score = float("nan") if metric is None or failed or not result.transitions else float(metric(result))
    return EpisodeOutcome(index=index, success=bool(result.success), failed=failed,
                          episode_return=result.episode_return, length=result.length, metric=score,
                          policy_s=timed.seconds - s0, calls=timed.calls - c0)


class TimedAgent:
    """An agent that also measures the time spent in it."""

    def __init__(self, agent: Any) -> None:
        self.agent, self.seconds, self.calls = agent, 0.0, 0

    def reset(self, seed: int | None = None) -> None:
        """The agent's reset (with the seed when it takes one)."""
        reset_agent(self.agent, seed)

    def instruct(self, text: str) -> None:
        """The agent's instruction, when it takes one."""
        instruct = getattr(self.agent, "instruct", None)
        if callable(instruct):
            instruct(text)

    def act(self, obs: Any) -> np.ndarray:
        """The agent's action, timed."""
        t = time.perf_counter()
        action = act(self.agent, obs)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return action


def _next_episode(counter: Any, episodes: int) -> int | None:
    """The next episode nobody took yet (None: all taken)."""
    with counter.get_lock():
        i = int(counter.value)
        if i >= episodes:
            return None
        counter.value = i + 1
    return i


def _worker(recipe: EvalRecipe, counter: Any, episodes: int, seed: int, max_steps: int | None,
            metric: Callable[[EpisodeResult], float] | None, results: Any) -> None:
    """A worker process: build the env and agent, run episodes off the counter, send each outcome."""
    try:
        import gymnasium as gym
        import torch

        import robot_rl.sim  # noqa: F401  (registers the robot_rl/ env ids)
        from robot_rl.runtime.policy_runner import PolicyRunner

        torch.set_num_threads(recipe.threads)
        env = gym.make(recipe.env_id, **recipe.env_options)
        try:
            agent = recipe.agent(env)
            timed = TimedAgent(PolicyRunner(agent) if isinstance(agent, Policy) else agent)
            while (i := _next_episode(counter, episodes)) is not None:
                results.put(("episode", episode_outcome(env, timed, i, seed, max_steps, metric)))
        finally:
            env.close()
    except BaseException:  # reported to the caller, who raises it
        results.put(("error", traceback.format_exc()))


def run_parallel(recipe: EvalRecipe, env: Any, timed: TimedAgent, episodes: int, seed: int, max_steps: int | None,
                 metric: Callable[[EpisodeResult], float] | None, workers: int,
                 progress: bool = False) -> list[EpisodeOutcome]:
    """Episodes ``0..episodes-1`` run by this process (``env``, ``timed``) and ``workers - 1`` spawned ones.

    Returns the outcomes in episode order. A worker's exception (or its death) raises a RuntimeError here once
    the others are stopped.
    """
    import multiprocessing as mp

    from tqdm import tqdm

    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(recipe, counter, episodes, seed, max_steps, metric, results),
                         name=f"eval-worker-{k}", daemon=True) for k in range(workers - 1)]
    for p in procs:
        p.start()
    outcomes: dict[int, EpisodeOutcome] = {}
    bar = tqdm(total=episodes, desc=f"eval ({workers} processes)", disable=not progress)

    def receive(block: bool) -> None:
        """Take what the workers sent (waiting up to POLL_S for the first message when ``block``)."""
        while True:
            try:
                kind, payload = results.get(timeout=POLL_S) if block else results.get_nowait()
            except queue.Empty:
                return
            block = False
            if kind == "error":
                raise RuntimeError(f"an evaluation worker failed:\n{payload}")
            outcomes[payload.index] = payload
            bar.update(1)

    try:
        while (i := _next_episode(counter, episodes)) is not None:
            outcomes[i] = episode_outcome(env, timed, i, seed, max_steps, metric)
            bar.update(1)
            receive(block=False)
        while len(outcomes) < episodes:
            receive(block=True)
            if len(outcomes) < episodes and not any(p.is_alive() for p in procs):
                receive(block=False)  # what a worker sent is in the pipe once it exited
                if len(outcomes) < episodes:
                    missing = sorted(set(range(episodes)) - set(outcomes))
                    codes = [p.exitcode for p in procs]
                    raise RuntimeError(f"evaluation workers ended (exit codes {codes}) without episodes {missing}")
        for p in procs:  # a worker that starts after the last episode was taken builds its agent all the same:
            p.join(timeout=JOIN_S)  # a recipe that fails there raises here too, not only when it was needed
        receive(block=False)
        if any(p.exitcode for p in procs):
            raise RuntimeError(f"evaluation workers exited with codes {[p.exitcode for p in procs]}")
    finally:
        bar.close()
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5.0)
        results.close()
    return [outcomes[i] for i in range(episodes)]
