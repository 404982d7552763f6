"""Many robot_rl envs in one process, their physics stepped in parallel C threads: a Gymnasium vector env.

Every robot_rl env runs a policy step's physics as one compiled loop (``mj_step1`` -> control law ->
actuator pipeline -> ``mj_step2`` in numba, :mod:`robot_rl.control.kernels.compiled`), and those loops
release the GIL. :class:`ThreadedVectorEnv` steps ``num_envs`` ordinary envs in lock step: each env's
Python part (checks, targets, observation, reward) runs in the calling thread, and all envs' physics
stretches run together on ``nthread`` worker threads (:meth:`RobotEnv.step_stages` hands them out). The
envs are the single envs themselves, so the physics, the controllers, domain randomisation, the
stand-ins and every task are exactly those of ``gym.make(env_id)`` (tested bit for bit); only the
scheduling differs. Same API and autoreset as ``gymnasium.vector.SyncVectorEnv`` (next-step autoreset,
``reset(seed=s)`` gives env ``i`` the seed ``s + i``, infos stacked with ``_key`` masks).

Where a task also has a hand-vectorised twin on ``mujoco.batch`` (``QuadHover-v0``:
:class:`robot_rl.sim.batched_quad.BatchedQuadHover`), that twin is faster still: it vectorises the Python
part too, at the cost of covering the nominal dynamics only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import concatenate, iterate

from robot_rl.core import SpecError
from robot_rl.sim.base_env import RobotEnv, StepResult, StepStages


def check_actions(actions: Any, space: gym.Space) -> np.ndarray:
    """A vector env's action batch as an array; SpecError (no env stepped) for a wrong shape, NaN or inf."""
    batch = np.asarray(actions)
    if batch.shape != space.shape:
        raise SpecError(f"actions: expected shape {space.shape}, got {batch.shape}")
    if batch.dtype.kind not in "biuf" or not np.all(np.isfinite(batch)):
        raise SpecError("actions: must be numbers without NaN or inf; rejected, no env stepped")
    return batch


def finish_steps(stages: dict[int, StepStages], pending: dict[int, int],
                 run_physics: Callable[[dict[int, int]], dict[int, str]]) -> dict[int, StepResult]:
    """Drive started steps (``stages``, each waiting for ``pending[i]`` physics steps) to their results.

    ``run_physics`` steps the requested envs together and reports their divergence reasons.
    """
    results: dict[int, StepResult] = {}
    while pending:
        reasons = run_physics(pending)
        pending = {}
        for i, reason in reasons.items():
            try:
                pending[i] = stages[i].send(reason)
            except StopIteration as done:
                results[i] = done.value
    return results


class PhysicsPool:
    """Runs many robot_rl envs' physics stretches at once: one share per thread, the caller's included.

    The envs' compiled loops release the GIL, so ``nthread`` shares run truly in parallel. Used by
    :class:`ThreadedVectorEnv` and by the open-loop replays of sim-to-real alignment (robot_rl.align).
    """

    def __init__(self, nthread: int | None = None) -> None:
        self.nthread = max(1, nthread if nthread is not None else len(os.sched_getaffinity(0)))
        self._pool = ThreadPoolExecutor(self.nthread - 1, thread_name_prefix="robot_rl-physics") \
            if self.nthread > 1 else None

    def run(self, envs: list[RobotEnv], requests: dict[int, int]) -> dict[int, str]:
        """``{env: physics steps}`` -> ``{env: divergence reason}``, the envs split into ``nthread`` shares."""
        ids = list(requests)
        shares = [ids[k::self.nthread] for k in range(self.nthread) if ids[k::self.nthread]]

        def run(share: list[int]) -> dict[int, str]:
            return {i: envs[i].run_physics(requests[i]) for i in share}

        others = [self._pool.submit(run, share) for share in shares[1:]] if self._pool is not None else []
        reasons = run(shares[0]) if shares else {}
        for future in others:
            reasons.update(future.result())
        return reasons

    def step(self, envs: list[RobotEnv], actions: np.ndarray, outcome: bool = True) -> list[StepResult]:
        """One ``env.step(actions[i])`` of every env, their physics in parallel.

        ``outcome=False``: physics only, see :meth:`RobotEnv.step_stages`.
        """
        stages = {i: env.step_stages(a, outcome) for i, (env, a) in enumerate(zip(envs, actions))}
        pending = {i: next(st) for i, st in stages.items()}
        results = finish_steps(stages, pending, lambda requests: self.run(envs, requests))
        return [results[i] for i in range(len(envs))]

    def close(self) -> None:
        """Stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _unwrapped_robot_env(env_id: str, kwargs: dict[str, Any]) -> RobotEnv:
    env = gym.make(env_id, **kwargs).unwrapped
    if not isinstance(env, RobotEnv):
        raise ValueError(f"vector 'threaded' needs a robot_rl env, {env_id} is {type(env).__name__}")
    return env


class ThreadedVectorEnv(SyncVectorEnv):
    """``num_envs`` copies of a ``robot_rl/`` env; their physics runs on ``nthread`` C threads at once.

    Args:
        env_id: A registered robot_rl id (any task, nominal, randomised or stand-in).
        num_envs: Copies.
        nthread: Worker threads for the physics (default: the CPUs this process may use).
        **kwargs: Passed to every ``gym.make(env_id, ...)`` (``randomization=``, ``max_episode_steps=``, ...).

    The episode length is the registered one (Gymnasium's ``TimeLimit``, applied here as the wrapper
    would: ``truncated`` once ``max_episode_steps`` steps have run).
    """

    def __init__(self, env_id: str, num_envs: int, nthread: int | None = None, **kwargs: Any) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        kwargs = dict(kwargs)
        limit = kwargs.pop("max_episode_steps", None)  # gym.make's argument: the TimeLimit, not the env's
        self.max_episode_steps: int | None = limit if limit is not None else gym.spec(env_id).max_episode_steps
        super().__init__([lambda: _unwrapped_robot_env(env_id, kwargs) for _ in range(num_envs)])
        self.robot_envs: list[RobotEnv] = [e for e in self.envs if isinstance(e, RobotEnv)]
        self.pool = PhysicsPool(nthread)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One policy step of every env (autoresetting ones only reset, as ``SyncVectorEnv``)."""
        check_actions(actions, self.action_space)
        stages: dict[int, StepStages] = {}
        pending: dict[int, int] = {}
        infos: dict[str, Any] = {}
        env_infos: dict[int, dict[str, Any]] = {}
        for i, action in enumerate(iterate(self.action_space, actions)):
            if self._autoreset_envs[i]:
                self._env_obs[i], env_infos[i] = self.envs[i].reset()
                self._rewards[i] = 0.0
                self._terminations[i] = self._truncations[i] = False
            else:
                stages[i] = self.robot_envs[i].step_stages(action)
                pending[i] = next(stages[i])
        results = finish_steps(stages, pending, self._run_physics)
        for i, (obs, reward, terminated, truncated, info) in results.items():
            if self.max_episode_steps is not None and self.robot_envs[i].elapsed_steps >= self.max_episode_steps:
                truncated = True  # gymnasium.wrappers.TimeLimit
            self._env_obs[i] = obs  # type: ignore[call-overload]  # gymnasium types it list[None]
            self._rewards[i] = reward
            self._terminations[i], self._truncations[i] = terminated, truncated
            env_infos[i] = info
        for i in range(self.num_envs):
            infos = self._add_info(infos, env_infos[i], i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        observations = deepcopy(self._observations) if self.copy else self._observations
        return observations, np.copy(self._rewards), np.copy(self._terminations), np.copy(self._truncations), infos

    def _run_physics(self, requests: dict[int, int]) -> dict[int, str]:
        return self.pool.run(self.robot_envs, requests)

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the worker threads, then close the envs."""
        self.pool.close()
        super().close_extras(**kwargs)
