"""Open-loop replay of recorded actions in the simulator, many segments at once, and the per-horizon gap.

Each segment starts at its recorded state (:class:`robot_rl.sim.base_env.StateOverride`) and is driven by its
recorded actions through the env's own controllers (the same ``env.step`` as training), so what is
compared is the whole command path: controller, actuators, physics. Segments run in lock step on a batch
of envs whose physics stretches share C threads (:class:`robot_rl.sim.threaded.PhysicsPool`); ``nthread=1``
with the Python physics loop is the reference loop the benchmark compares against.

Hooks make the same replay serve every method: per-env ``dynamics`` (system identification candidates,
domain randomisation), ``delta`` (a delta-action model adds its correction to each action) and
``correct`` (a delta-dynamics model corrects each next state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from robot_rl.align.config import AlignConfig
from robot_rl.align.episodes import Episode, Segments
from robot_rl.align.layout import StateLayout, layout_for
from robot_rl.sim.base_env import RobotEnv, StateOverride
from robot_rl.sim.config import Randomization
from robot_rl.sim.threaded import PhysicsPool

DeltaFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""(features (N, F), actions (N, A), previous actions (N, A)) -> action corrections (N, A), in the env's action
units. The previous action is an input because the real robot's actuators still answer to it (command delay,
motor lag), as ASAP's delta model sees its history."""
CorrectFn = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                     tuple[np.ndarray, np.ndarray]]
"""(qpos_before, qvel_before, actions, previous actions, qpos_after, qvel_after) -> corrected (qpos_after,
qvel_after)."""
ChooseFn = Callable[[list[RobotEnv], list[int], int], np.ndarray]
"""(envs, episode indices, step) -> the actions (N, A) to apply at that step of a teacher-forced pass."""


@dataclass(frozen=True)
class Rollout:
    """Simulated states of replayed segments, aligned with the recorded ones."""

    qpos: np.ndarray
    """(N, H + 1, nq); a diverged replay repeats its last finite state."""
    qvel: np.ndarray
    """(N, H + 1, nv)."""
    diverged: np.ndarray
    """(N,) whether the simulation diverged (counted at its last state's error)."""


@dataclass(frozen=True)
class Gap:
    """Per-horizon errors of a rollout against the recorded segments."""

    errors: dict[str, np.ndarray]
    """Error name -> (N, H + 1) per segment and step."""
    dt: float
    """Seconds per step."""
    diverged: int
    """Replays that diverged."""

    def mean(self, name: str, horizon_s: float | None = None) -> float:
        """Mean of error ``name`` over segments and the steps up to ``horizon_s`` (default: all)."""
        e = self.errors[name]
        steps = e.shape[1] - 1 if horizon_s is None else min(e.shape[1] - 1, round(horizon_s / self.dt))
        return float(np.mean(e[:, 1:steps + 1]))

    def at(self, name: str, horizon_s: float) -> float:
        """Mean error ``name`` exactly ``horizon_s`` after the start."""
        e = self.errors[name]
        return float(np.mean(e[:, min(e.shape[1] - 1, round(horizon_s / self.dt))]))

    def curve(self, name: str) -> np.ndarray:
        """Mean error per step (H + 1,)."""
        return np.mean(self.errors[name], axis=0)


class Replayer:
    """``num_envs`` nominal simulators replaying recorded segments in lock step."""

    def __init__(self, cfg: AlignConfig, num_envs: int, nthread: int | None = None, compiled: bool = True) -> None:
        import robot_rl.sim  # noqa: F401  (registers the ids)

        self.cfg = cfg
        self.layout: StateLayout = layout_for(cfg.robot)
        self.envs: list[RobotEnv] = []
        for _ in range(num_envs):
            env = gym.make(cfg.env_id, **cfg.env_options).unwrapped
            if not isinstance(env, RobotEnv):
                raise TypeError(f"env_id: {cfg.env_id} is not a robot_rl env")
            if cfg.robot != env.ROBOT:
                raise ValueError(f"env_id: {cfg.env_id} simulates {env.ROBOT!r}, the config is for {cfg.robot!r}")
            env.compiled_physics = env.compiled_physics and compiled
            self.envs.append(env)
        self.nominal = self.envs[0].dynamics
        self.pool = PhysicsPool(nthread if nthread is not None else cfg.nthread)
        first = self.envs[0]
        self.model = first.model
        self.dt = 1.0 / first.config.policy_hz
        self.low, self.high = first.action_space.low.astype(np.float64), first.action_space.high.astype(np.float64)

    @property
    def num_envs(self) -> int:
        """Segments replayed at once."""
        return len(self.envs)

    def close(self) -> None:
        """Stop the threads and close the envs."""
        self.pool.close()
        for env in self.envs:
            env.close()

    # ---- primitives (also used by the delta-action fit) --------------------------------------------------------
    def start(self, envs: Sequence[RobotEnv], states: Sequence[StateOverride],
              dynamics: Sequence[Randomization], seed: int) -> None:
        """Reset ``envs[i]`` at ``states[i]`` under ``dynamics[i]`` (resampled from seed ``seed + i``)."""
        for i, (env, state, dyn) in enumerate(zip(envs, states, dynamics)):
            env.dynamics = dyn
            env.reset(seed=seed + i, options={"state": state})

    def measure(self, envs: Sequence[RobotEnv]) -> tuple[np.ndarray, np.ndarray]:
        """The envs' current (qpos, qvel) in the layout, (N, nq) / (N, nv)."""
        q = np.stack([e.data.qpos[self.layout.qpos_index] for e in envs])
        v = np.stack([e.data.qvel[self.layout.qvel_index] for e in envs])
        return q, v

    def step(self, envs: Sequence[RobotEnv], actions: np.ndarray) -> np.ndarray:
        """One env step each (physics in parallel); returns which diverged."""
        results = self.pool.step(list(envs), np.clip(actions, self.low, self.high), outcome=False)
        return np.array([bool(r[3]) and r[4].get("truncation_reason", "") != "time_limit" for r in results])

    def corrected(self, actions: np.ndarray, previous: np.ndarray, qpos: np.ndarray, qvel: np.ndarray,
                  delta: DeltaFn | None) -> np.ndarray:
        """``actions`` plus ``delta``'s correction for the states (qpos, qvel), clipped to the action space."""
        if delta is None:
            return actions
        return np.clip(actions + delta(self.layout.features(qpos, qvel), actions, previous), self.low, self.high)

    def begin(self, envs: Sequence[RobotEnv], seg: Segments, idx: np.ndarray, dynamics: Sequence[Randomization],
              seed: int, delta: DeltaFn | None = None) -> np.ndarray:
        """Start ``envs`` on windows ``idx`` and run their teacher-forced lead-in; returns which diverged in it.

        The lead-in drives the recorded actions (corrected by ``delta``, as the open-loop part will be) and puts
        each env back on the recorded state after every step, so the hidden actuator state follows the
        recorded command history. On return the live envs stand on the recorded state at the open-loop start.
        """
        self.start(envs, [seg.start(self.layout, int(i)) for i in idx], dynamics, seed)
        diverged = np.zeros(len(idx), dtype=bool)
        for t in range(seg.warmup):
            act = self.corrected(seg.actions[idx, t], seg.actions[idx, max(0, t - 1)], seg.qpos[idx, t],
                                 seg.qvel[idx, t], delta)
            live = [int(k) for k in np.flatnonzero(~diverged)]
            diverged[np.asarray(live)[self.step([envs[k] for k in live], act[live])]] = True
            live = [int(k) for k in np.flatnonzero(~diverged)]
            self.set_states([envs[k] for k in live], seg.qpos[idx, t + 1][live], seg.qvel[idx, t + 1][live])
        return diverged

    def set_states(self, envs: Sequence[RobotEnv], qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Move each env to the given layout state (controllers keep theirs)."""
        lay = self.layout
        for env, q, v in zip(envs, qpos, qvel):
            env.set_state(StateOverride(lay.qpos_index, q, lay.qvel_index, v))

    # ---- whole replays -----------------------------------------------------------------------------------------
    def replay(self, seg: Segments, dynamics: Randomization | Sequence[Randomization] | None = None,
               delta: DeltaFn | None = None, correct: CorrectFn | None = None, seed: int = 0,
               progress: bool = False, desc: str = "replay") -> Rollout:
        """Replay every segment open loop from its first recorded state.

        ``dynamics`` is one set for all segments or one per segment (default: the nominal simulator).
        """
        n, w, h = len(seg), seg.warmup, seg.horizon
        dyn = [dynamics or self.nominal] * n if not isinstance(dynamics, Sequence) else list(dynamics)
        if len(dyn) != n:
            raise ValueError(f"dynamics: {len(dyn)} sets for {n} segments")
        qpos = np.empty((n, h + 1, self.layout.nq))
        qvel = np.empty((n, h + 1, self.layout.nv))
        diverged = np.zeros(n, dtype=bool)
        bar = tqdm(total=n * (w + h), desc=desc, unit="step", disable=not progress, unit_scale=True, leave=False)
        for lo in range(0, n, self.num_envs):
            idx = np.arange(lo, min(n, lo + self.num_envs))
            envs = self.envs[:len(idx)]
            alive = ~self.begin(envs, seg, idx, [dyn[i] for i in idx], seed + lo, delta)
            bar.update(len(idx) * w)
            qpos[idx, 0], qvel[idx, 0] = seg.qpos[idx, w], seg.qvel[idx, w]
            for t in range(h):
                act, prev = seg.actions[idx, w + t], seg.actions[idx, max(0, w + t - 1)]
                q0, v0 = qpos[idx, t], qvel[idx, t]
                act = self.corrected(act, prev, q0, v0, delta)
                live = np.flatnonzero(alive)
                div = self.step([envs[k] for k in live], act[live])
                q1, v1 = self.measure(envs)
                if correct is not None:
                    q1, v1 = correct(q0, v0, act, prev, q1, v1)
                    q1 = self.layout.normalize(q1)
                    ok = alive & np.all(np.isfinite(q1), axis=1) & np.all(np.isfinite(v1), axis=1)
                    div = div | ~ok[live]
                    self.set_states([envs[k] for k in np.flatnonzero(ok)], q1[ok], v1[ok])
                alive[live[div]] = False
                q1[~alive], v1[~alive] = q0[~alive], v0[~alive]
                qpos[idx, t + 1], qvel[idx, t + 1] = q1, v1
                bar.update(len(idx))
            diverged[idx] = ~alive
        bar.close()
        return Rollout(qpos, qvel, diverged)

    def teacher_forced(self, episodes: Sequence[Episode], choose: ChooseFn, progress: bool = False,
                       desc: str = "teacher forcing") -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Step along recorded episodes, put back on the recorded state before every step.

        ``choose(envs, episode_indices, t)`` returns the actions to apply at step ``t`` (the recorded ones, or
        corrected ones found by probing the envs with snapshot/restore). Returns per episode the applied
        actions (T, A) and the simulator's one-step predictions (T, nq) / (T, nv) of the next recorded state;
        the actuators' hidden state follows the applied actions, as it followed the commands on the robot.
        """
        out = [(np.empty_like(ep.actions), np.empty((len(ep.actions), self.layout.nq)),
                np.empty((len(ep.actions), self.layout.nv))) for ep in episodes]
        bar = tqdm(total=sum(len(ep.actions) for ep in episodes), desc=desc, unit="step", disable=not progress,
                   unit_scale=True, leave=False)
        lay = self.layout
        for lo in range(0, len(episodes), self.num_envs):
            idx = list(range(lo, min(len(episodes), lo + self.num_envs)))
            envs = self.envs[:len(idx)]
            self.start(envs, [StateOverride(lay.qpos_index, episodes[i].qpos[0], lay.qvel_index, episodes[i].qvel[0])
                              for i in idx], [self.nominal] * len(idx), 0)
            for t in range(max(len(episodes[i].actions) for i in idx)):
                live = [k for k, i in enumerate(idx) if t < len(episodes[i].actions)]
                live_envs, live_eps = [envs[k] for k in live], [idx[k] for k in live]
                if t > 0:
                    self.set_states(live_envs, np.stack([episodes[i].qpos[t] for i in live_eps]),
                                    np.stack([episodes[i].qvel[t] for i in live_eps]))
                actions = np.clip(choose(live_envs, live_eps, t), self.low, self.high)
                diverged = self.step(live_envs, actions)
                if np.any(diverged):
                    bad = [episodes[live_eps[k]].name for k in np.flatnonzero(diverged)]
                    raise RuntimeError(f"the simulator diverged at step {t} of episode(s) {bad} although it was put "
                                       f"back on the recorded state; check the recorded states")
                q, v = self.measure(live_envs)
                for k, i in enumerate(live_eps):
                    out[i][0][t], out[i][1][t], out[i][2][t] = actions[k], q[k], v[k]
                bar.update(len(live))
        bar.close()
        return out

    def gap(self, seg: Segments, rollout: Rollout) -> Gap:
        """Errors of ``rollout`` against the recorded segments, per segment and step."""
        qpos, qvel = seg.open_loop()
        errors = self.layout.error(self.model, rollout.qpos, rollout.qvel, qpos, qvel)
        return Gap(errors, self.dt, int(rollout.diverged.sum()))
