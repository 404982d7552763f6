"""Recorded motions of the real robot: recording them, reading them back checked, cutting them into segments.

An alignment episode is an ordinary episode of the store (:mod:`robot_rl.data.store`) whose observations
carry the robot's measured state as ``qpos`` / ``qvel`` (:mod:`robot_rl.align.layout`) and whose ``action``
column holds the actions the robot really applied. In simulation :class:`MeasuredState` adds the two keys
to a stand-in env's observation and :func:`collect` records through the same recorder as demonstrations;
a robot's own logs must provide the same keys. The alignment code reads only these episodes, never
a stand-in's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.align.config import AlignConfig
from robot_rl.align.layout import StateLayout, layout_for
from robot_rl.core import FieldSpec
from robot_rl.data.schema import DatasetError
from robot_rl.data.store import EpisodeStore
from robot_rl.runtime.episode import act, reset_agent
from robot_rl.sim.alignment import AlignmentError
from robot_rl.sim.base_env import RobotEnv, StateOverride


class MeasuredState(gym.ObservationWrapper):
    """Adds the robot's measured joint state (``qpos``, ``qvel`` of its layout) to a robot_rl env's observation."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, RobotEnv):
            raise TypeError(f"MeasuredState needs a robot_rl env, got {type(base).__name__}")
        self.layout = layout_for(base.ROBOT)
        spaces = dict(env.observation_space.spaces)  # type: ignore[attr-defined]
        spaces["qpos"] = FieldSpec((self.layout.nq,), description="measured joint positions").to_space()
        spaces["qvel"] = FieldSpec((self.layout.nv,), description="measured joint velocities").to_space()
        self.observation_space = gym.spaces.Dict(spaces)

    def observation(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The env's observation plus the measured state."""
        data = self.env.unwrapped.data  # type: ignore[attr-defined]
        return {**observation, "qpos": data.qpos[self.layout.qpos_index].astype(np.float32),
                "qvel": data.qvel[self.layout.qvel_index].astype(np.float32)}


class ExcitedDriver:
    """An expert or policy plus Gaussian excitation, clipped to the action space: what is sent is what is applied."""

    def __init__(self, agent: Any, space: gym.spaces.Box, excitation: float, seed: int) -> None:
        self.agent, self.space, self.excitation = agent, space, excitation
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        """Reset the agent (and re-seed the excitation) for a new episode."""
        reset_agent(self.agent, seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed + 7_919)

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The agent's action plus excitation, clipped to the space."""
        action = act(self.agent, obs).astype(np.float64)
        span = self.space.high - self.space.low
        noisy = action + self.rng.normal(0.0, self.excitation, action.shape) * span
        return np.clip(noisy, self.space.low, self.space.high).astype(np.float32)


def _driver(cfg: AlignConfig, env: gym.Env) -> Any:
    if cfg.collect.driver == "expert":
        from robot_rl.sim.experts import expert_for

        return expert_for(env)
    from robot_rl.policies.base import Policy
    from robot_rl.runtime.policy_runner import PolicyRunner

    return PolicyRunner(Policy.load(cfg.collect.driver))


def collect(cfg: AlignConfig, out: str | Path, progress: bool = True) -> Path:
    """Record ``cfg.collect.episodes`` episodes on ``cfg.collect.env_id`` (the real robot) into a new store."""
    import robot_rl.sim  # noqa: F401  (registers the ids)
    from robot_rl.data.env_info import dataset_info
    from robot_rl.data.recorder import record

    c = cfg.collect
    env = MeasuredState(gym.make(c.env_id, **c.env_options))
    if env.layout.robot != cfg.robot:
        raise AlignmentError(f"collect.env_id: {c.env_id} is robot {env.layout.robot!r}, "
                             f"the config is for {cfg.robot!r}")
    try:
        driver = ExcitedDriver(_driver(cfg, env), env.action_space, c.excitation, c.seed)  # type: ignore[arg-type]
        info = dataset_info(env, c.env_id, task=f"alignment motions ({c.driver})", source=f"align collect {c.env_id}")
        store = EpisodeStore.create(out, info)
        try:
            record(env, driver, store, c.episodes, max_steps=c.steps, seed=c.seed, progress=progress)
        finally:
            store.close()
    finally:
        env.close()
    return Path(out)


@dataclass(frozen=True)
class Episode:
    """One recorded motion: T applied actions and the T + 1 measured states around them."""

    name: str
    """``<store>#<index>`` (what errors name)."""
    qpos: np.ndarray
    """(T + 1, nq) measured joint positions."""
    qvel: np.ndarray
    """(T + 1, nv) measured joint velocities."""
    actions: np.ndarray
    """(T, A) applied actions."""


@dataclass(frozen=True)
class Segments:
    """Fixed-length windows of recorded motions, replayed open loop from a recorded state.

    Each window starts with ``warmup`` steps that the replay drives with the recorded actions while holding
    the simulator on the recorded states (teacher forcing): the actuators' and controllers' hidden state
    (motor lag, command delay, a rate loop's estimates) then reflects the recorded command history, as it
    did on the robot, before the open-loop part begins.
    """

    qpos: np.ndarray
    """(N, warmup + H + 1, nq)."""
    qvel: np.ndarray
    """(N, warmup + H + 1, nv)."""
    actions: np.ndarray
    """(N, warmup + H, A)."""
    source: list[str]
    """Episode and first open-loop step of each window (``store#3@50``)."""
    warmup: int = 0
    """Teacher-forced steps before the open-loop part."""

    @property
    def horizon(self) -> int:
        """Open-loop steps per window."""
        return int(self.actions.shape[1]) - self.warmup

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def take(self, index: np.ndarray | list[int]) -> Segments:
        """The windows at ``index``."""
        idx = np.asarray(index, dtype=np.intp)
        return Segments(self.qpos[idx], self.qvel[idx], self.actions[idx], [self.source[i] for i in idx], self.warmup)

    def start(self, layout: StateLayout, i: int, t: int = 0) -> StateOverride:
        """The recorded state of window ``i`` at step ``t`` (0: the start of the warm-up) as an env state override."""
        return StateOverride(layout.qpos_index, self.qpos[i, t], layout.qvel_index, self.qvel[i, t])

    def open_loop(self) -> tuple[np.ndarray, np.ndarray]:
        """The recorded states of the open-loop part, (N, H + 1, nq) / (N, H + 1, nv)."""
        return self.qpos[:, self.warmup:], self.qvel[:, self.warmup:]


def load_episodes(path: str | Path, cfg: AlignConfig, action_dim: int, fps: float) -> list[Episode]:
    """Every episode of the store at ``path``, checked against the robot, rate and action size the sim expects.

    Raises AlignmentError naming the store (robot, rate) or the episode (missing or non-finite applied
    actions, missing or non-finite states, wrong sizes). Takes of fewer than 2 steps are skipped. recorder_node's
    absolute tool targets (``controller.control_mode: cartesian_pose``) are replayed as they are by a simulator
    with that control mode, or converted to the arm envs' delta actions (``action_dim`` 7) where they fit.
    """
    layout = layout_for(cfg.robot)
    try:
        store = EpisodeStore.open(path)
    except DatasetError as exc:
        raise AlignmentError(str(exc)) from exc
    try:
        if store.info.robot != cfg.robot:
            raise AlignmentError(f"{path}: recorded on robot {store.info.robot!r}, the alignment is for {cfg.robot!r}")
        if abs(store.info.fps - fps) > 1e-6 * fps:
            raise AlignmentError(f"{path}: recorded at {store.info.fps:g} Hz, the simulator {cfg.env_id} steps at "
                                 f"{fps:g} Hz; record at the policy rate or change env_options.policy_hz")
        columns = set(store.column_names())
        missing = [c for c in ("observation.qpos", "observation.qvel", "action") if c not in columns]
        if missing:
            raise AlignmentError(f"{path}: no {missing} columns; alignment needs the measured state (qpos, qvel) "
                                 f"and the applied actions of every step")
        pose_log = control_mode_of(store) == "cartesian_pose"
        pose_targets = pose_log and action_dim == 7  # the simulator takes delta actions: convert the targets
        if pose_targets:
            missing = [c for c in ("observation.tcp_pos", "observation.tcp_quat") if c not in columns]
            if missing:
                raise AlignmentError(f"{path}: absolute tool targets need the measured tool pose {missing} to become "
                                     f"the simulator's delta actions")
        out = []
        for i in range(store.num_episodes):
            keys = ["observation.qpos", "observation.qvel", "action"]
            ep = store.read_episode(i, keys + (["observation.tcp_pos", "observation.tcp_quat"] if pose_targets else []))
            final = store.final_observation(i)
            name = f"{Path(path).name}#{i}"
            qpos = np.concatenate([ep["observation.qpos"], final["qpos"][None]]).astype(np.float64)
            qvel = np.concatenate([ep["observation.qvel"], final["qvel"][None]]).astype(np.float64)
            actions = np.asarray(ep["action"], dtype=np.float64)
            if len(actions) < 2:  # a take cut right after it began (e.g. at shutdown): no motion to replay
                continue
            if pose_log:
                actions = _pose_log_actions(name, ep, actions, fps, as_deltas=pose_targets)
            _check_episode(name, layout, qpos, qvel, actions, action_dim)
            out.append(Episode(name, qpos, qvel, actions))
    finally:
        store.close()
    return out


def control_mode_of(store: EpisodeStore) -> str:
    """The control mode the store's actions are in (``cartesian_pose``: recorder_node's absolute tool targets)."""
    mode = str((store.info.controller or {}).get("control_mode", ""))
    return "cartesian_pose" if mode == "absolute_pose" else mode


MAX_CLIPPED_STEPS = 0.05
"""Largest share of an episode's absolute targets that may lie beyond one step of the delta action range."""


def _pose_log_actions(name: str, ep: dict[str, np.ndarray], actions: np.ndarray, fps: float,
                      as_deltas: bool) -> np.ndarray:
    """recorder_node's ``[x, y, z, qw, qx, qy, qz, gripper 0..1]`` in the simulator's terms.

    The gripper becomes the arm envs' action in [-1, 1]; the pose stays as it is (``cartesian_pose``) or, with
    ``as_deltas``, becomes the 6-D delta actions that reach each target from the measured tool pose.
    """
    from robot_rl.runtime.arm_actions import deltas_from_targets

    if actions.ndim != 2 or actions.shape[1] != 8:
        raise AlignmentError(f"episode {name}: absolute tool targets have 8 values per step, got {actions.shape}")
    _check_actions_finite(name, actions)
    gripper = 2.0 * np.clip(actions[:, 7:], 0.0, 1.0) - 1.0
    if not as_deltas:
        return np.c_[actions[:, :7], gripper]
    deltas, clipped = deltas_from_targets(ep["observation.tcp_pos"], ep["observation.tcp_quat"], actions[:, :3],
                                          actions[:, 3:7], fps)
    if clipped.mean() > MAX_CLIPPED_STEPS:
        raise AlignmentError(f"episode {name}: {clipped.mean():.0%} of the tool targets lie beyond one step of the "
                             f"simulator's action range (first at steps {np.flatnonzero(clipped)[:5].tolist()}); "
                             f"they cannot be replayed as deltas: replay in a simulator with "
                             f"env_options.control_mode: cartesian_pose")
    return np.c_[deltas, gripper]


def _check_actions_finite(name: str, actions: np.ndarray) -> None:
    bad = np.flatnonzero(~np.all(np.isfinite(actions), axis=1))
    if bad.size:
        raise AlignmentError(f"episode {name}: applied actions missing (NaN/inf) at steps {bad[:5].tolist()}; "
                             f"record the commands the robot executed")


def _check_episode(name: str, layout: StateLayout, qpos: np.ndarray, qvel: np.ndarray, actions: np.ndarray,
                   action_dim: int) -> None:
    if qpos.shape[1] != layout.nq or qvel.shape[1] != layout.nv:
        raise AlignmentError(f"episode {name}: states have {qpos.shape[1]} qpos / {qvel.shape[1]} qvel values, "
                             f"robot {layout.robot} has {layout.nq} / {layout.nv}")
    if actions.ndim != 2 or actions.shape[1] != action_dim:
        raise AlignmentError(f"episode {name}: actions have shape {actions.shape}, the simulator takes {action_dim}")
    _check_actions_finite(name, actions)
    bad = np.flatnonzero(~(np.all(np.isfinite(qpos), axis=1) & np.all(np.isfinite(qvel), axis=1)))
    if bad.size:
        raise AlignmentError(f"episode {name}: non-finite measured state at steps {bad[:5].tolist()}")


def segments(episodes: list[Episode], horizon: int, warmup: int = 0) -> Segments:
    """Non-overlapping open-loop windows of ``horizon`` steps, each after ``warmup`` recorded steps.

    The first window of an episode starts at step ``warmup``; shorter tails are dropped.
    """
    qp, qv, ac, src = [], [], [], []
    for ep in episodes:
        for t in range(warmup, len(ep.actions) - horizon + 1, horizon):
            qp.append(ep.qpos[t - warmup:t + horizon + 1])
            qv.append(ep.qvel[t - warmup:t + horizon + 1])
            ac.append(ep.actions[t - warmup:t + horizon])
            src.append(f"{ep.name}@{t}")
    if not qp:
        raise AlignmentError(f"no episode is {warmup + horizon} steps long; record longer episodes or shorten "
                             f"horizon_s / warmup_s")
    return Segments(np.stack(qp), np.stack(qv), np.stack(ac), src, warmup)


def previous(actions: np.ndarray) -> np.ndarray:
    """The action before each one (T, A); the first step's is itself (nothing was commanded before)."""
    return np.concatenate([actions[:1], actions[:-1]])


def split(episodes: list[Episode], holdout: int) -> tuple[list[Episode], list[Episode]]:
    """(training episodes, held-out episodes): the last ``holdout`` are held out."""
    if not 1 <= holdout < len(episodes):
        raise AlignmentError(f"holdout_episodes: {holdout} of {len(episodes)} recorded episodes leaves none to fit on")
    return episodes[:-holdout], episodes[-holdout:]
