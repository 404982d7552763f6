"""Many environments at once: Gymnasium's vector API, and MuJoCo's threaded open-loop rollouts.

* :func:`make_vector_env`: ``num_envs`` copies of a ``robot_rl/`` id: ``gym.make_vec`` synchronous (one
  process) or asynchronous (one process per env), ``threaded`` (one process, every env's compiled physics
  loop on C threads at once: :class:`robot_rl.sim.threaded.ThreadedVectorEnv`, any task) or ``batched``
  (a task's hand-vectorised twin on ``mujoco.batch``, QuadHover-v0 only) or ``warp`` (physics on MuJoCo
  Warp, a GPU when present: QuadHover-v0's twin, or the G1 tasks through
  :class:`robot_rl.sim.warp_vector.WarpVectorEnv`).
* :func:`batch_rollout`: ``mujoco.rollout`` over many initial states and/or many perturbed models
  with OPEN-LOOP controls in C threads, e.g. replaying logged actuator commands through a batch of
  candidate dynamics for sim-to-real alignment. It cannot host the Python controllers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

import robot_rl.sim  # noqa: F401  (registers the ids)


def make_vector_env(env_id: str, num_envs: int, asynchronous: bool = False, batched: bool = False,
                    threaded: bool = False, warp: bool = False, processes: int = 1,
                    **kwargs: Any) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id`` (keyword arguments go to every env, e.g. ``randomization=``).

    Seeding ``reset(seed=s)`` gives env ``i`` the seed ``s + i``, so a vector run is reproducible.
    ``batched=True`` picks the ``mujoco.batch`` implementation where one exists (QuadHover-v0:
    :class:`robot_rl.sim.batched_quad.BatchedQuadHover`, nominal dynamics, ~8-10x faster).
    ``threaded=True`` steps all copies' physics at once on C threads (any robot_rl id, same envs); with
    ``processes`` > 1 the copies are split over that many worker processes, one thread each, so their Python
    parts run in parallel too (:class:`robot_rl.sim.sharded.ShardedVectorEnv`, the same envs and seeds).
    ``warp=True`` runs the physics on MuJoCo Warp (``device=`` auto/cpu/cuda:N; nominal QuadHover-v0 and
    the G1 tasks).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if sum((asynchronous, batched, threaded, warp)) > 1:
        raise ValueError("make_vector_env: choose at most one of asynchronous, batched, threaded, warp")
    if warp:
        if env_id == "robot_rl/QuadHover-v0":
            from robot_rl.sim.batched_quad import BatchedQuadHover

            return BatchedQuadHover(num_envs, physics="warp", **kwargs)
        from robot_rl.sim.warp_vector import WarpVectorEnv

        return WarpVectorEnv(env_id, num_envs, **kwargs)
    if processes != 1 and not threaded:
        raise ValueError(f"processes={processes}: worker processes split threaded envs only (threaded=True)")
    if threaded and processes > 1:
        from robot_rl.sim.sharded import ShardedVectorEnv

        return ShardedVectorEnv(env_id, num_envs, min(processes, num_envs), **kwargs)
    if threaded:
        from robot_rl.sim.threaded import ThreadedVectorEnv

        return ThreadedVectorEnv(env_id, num_envs, **kwargs)
    if batched:
        if env_id != "robot_rl/QuadHover-v0":
            raise ValueError(f"batched=True: only robot_rl/QuadHover-v0 has a mujoco.batch version, not {env_id}")
        from robot_rl.sim.batched_quad import BatchedQuadHover

        return BatchedQuadHover(num_envs, **kwargs)
    mode = "async" if asynchronous else "sync"
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)


def full_state(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """The complete physics state (``mjSTATE_FULLPHYSICS``) as ``batch_rollout`` takes and returns it."""
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    return state


def batch_rollout(models: mujoco.MjModel | Sequence[mujoco.MjModel], initial_states: np.ndarray,
                  controls: np.ndarray, nthread: int = 2) -> np.ndarray:
    """Open-loop rollouts in C threads: (nbatch, nstep, nstate) states.

    Args:
        models: One model, or one per batch element (same sizes, other parameters: randomised dynamics).
        initial_states: (nbatch or 1, nstate) full-physics states (see :func:`full_state`).
        controls: (nbatch or 1, nstep, nu) ctrl values applied at each step.
        nthread: Worker threads (one MjData each).
    """
    model_list = [models] if isinstance(models, mujoco.MjModel) else list(models)
    if not np.all(np.isfinite(controls)) or not np.all(np.isfinite(initial_states)):
        raise ValueError("batch_rollout: controls and initial states must be finite")
    datas = [mujoco.MjData(model_list[0]) for _ in range(max(1, nthread))]
    state, _ = mj_rollout.rollout(model_list if len(model_list) > 1 else model_list[0], datas,
                                  np.atleast_2d(initial_states), np.asarray(controls, dtype=np.float64))
    return np.asarray(state)
