"""Threaded robot_rl envs split over worker processes, so their Python runs on every core too.

:class:`robot_rl.sim.threaded.ThreadedVectorEnv` runs the envs' physics on C threads, but each env's Python
part (action checks, targets, reward, observation) holds the GIL: for the G1 that part is about 60 % of a
step, so one process tops out near one core's worth of Python however many threads step the physics.
:class:`ShardedVectorEnv` gives each of ``processes`` workers a ThreadedVectorEnv with one thread and
``num_envs / processes`` envs, and steps them together (benchmarks/README.md, "G1 walking": the ratio).
The envs, the seeding (env ``i`` resets with ``seed + i``), the next-step autoreset and the stacked
infos are the ThreadedVectorEnv's, so a run is the same whatever the split (tested).

Workers are forked (as gymnasium's AsyncVectorEnv does on Linux: no re-import, and ``spawn`` would run an
unguarded main script again); they never touch torch, whose threads the parent may hold, and talk over
pipes to this process only; they exit with it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.sim.threaded import check_actions


def _worker(conn: Connection, env_id: str, num_envs: int, kwargs: dict[str, Any]) -> None:
    """One shard: a single-threaded ThreadedVectorEnv driven by ``(command, argument)`` messages."""
    import robot_rl.sim  # noqa: F401  (registers the env ids in the fresh process)
    from robot_rl.sim.threaded import ThreadedVectorEnv

    env = None
    try:
        env = ThreadedVectorEnv(env_id, num_envs, nthread=1, **kwargs)
        conn.send(("ok", (env.single_observation_space, env.single_action_space)))
        while True:
            cmd, arg = conn.recv()
            if cmd == "step":
                conn.send(("ok", env.step(arg)))
            elif cmd == "reset":
                conn.send(("ok", env.reset(seed=arg[0], options=arg[1])))
            elif cmd == "close":
                break
    except (KeyboardInterrupt, EOFError):
        pass
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        if env is not None:
            env.close()
        conn.close()


def merge_batches(parts: list[Any], sizes: list[int]) -> Any:
    """Shards' stacked outputs (arrays, dicts of them, nested) -> one stack in shard order.

    An info key that some shards did not report this step is filled for their envs as gymnasium does for
    an env that did not report it: zeros / False (so its ``_key`` mask says so).
    """
    template = next(p for p in parts if p is not None)
    if isinstance(template, dict):
        keys = {k for p in parts if p is not None for k in p}
        return {k: merge_batches([None if p is None else p.get(k) for p in parts], sizes) for k in keys}
    arrays = [np.zeros((n, *np.shape(template)[1:]), np.asarray(template).dtype) if p is None else np.asarray(p)
              for p, n in zip(parts, sizes)]
    return np.concatenate(arrays, axis=0)


class ShardedVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a robot_rl env in ``processes`` worker processes (ThreadedVectorEnv each)."""

    def __init__(self, env_id: str, num_envs: int, processes: int = 2, **kwargs: Any) -> None:
        if not 1 <= processes <= num_envs:
            raise ValueError(f"processes: need 1 <= processes <= num_envs ({num_envs}), got {processes}")
        self.num_envs = num_envs
        self.sizes = [len(range(num_envs)[k::processes]) for k in range(processes)]
        self.offsets = np.cumsum([0, *self.sizes[:-1]]).tolist()
        ctx = mp.get_context("fork")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for size in self.sizes:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, env_id, size, kwargs), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        spaces = self._gather()
        self.single_observation_space, self.single_action_space = spaces[0]
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        self.closed = False

    def _gather(self) -> list[Any]:
        out = []
        errors = []
        for conn in self.conns:
            try:
                status, value = conn.recv()
            except EOFError:
                status, value = "error", "the worker process died"
            if status == "error":
                errors.append(value)
            out.append(value)
        if errors:
            self.close()
            raise RuntimeError(f"ShardedVectorEnv: a worker failed: {errors[0]}")
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every env (env ``i`` with ``seed + i``)."""
        for conn, offset in zip(self.conns, self.offsets):
            conn.send(("reset", (None if seed is None else seed + offset, options)))
        parts = self._gather()
        return merge_batches([p[0] for p in parts], self.sizes), merge_batches([p[1] for p in parts], self.sizes)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One policy step of every env (checked here first, so a bad batch steps no shard)."""
        batch = check_actions(actions, self.action_space)
        for conn, offset, size in zip(self.conns, self.offsets, self.sizes):
            conn.send(("step", batch[offset:offset + size]))
        parts = self._gather()
        obs, rewards, terminated, truncated, infos = (merge_batches([p[k] for p in parts], self.sizes)
                                                      for k in range(5))
        return obs, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers."""
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("close", None))
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
        for conn in self.conns:
            conn.close()
