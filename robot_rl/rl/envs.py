"""The environments of a run: built, checked against the config, flattened, their actions scaled.

Everything that can be wrong with a config's environment is found here, before the first step, and
raised as a :class:`~robot_rl.core.config.ConfigError` naming the key: an unknown env id, an action space
that is not a bounded Box, observation keys that do not exist or are images, an ``initial_action`` of
the wrong length. Dict observations are flattened in a fixed key order (``RLConfig.obs_keys`` or the
space's own sorted order), the order the exported policy's ``spec.state_dims`` records, so the policy
node and ``robot-rl eval`` feed it the same vector. Policies act in [-1, 1]^A; :meth:`EnvSpec.to_env`
maps that onto the action space's bounds.

Vector envs follow Gymnasium's next-step autoreset (robot_rl.sim.batched_quad.BatchedQuadHover and
``gym.make_vec`` alike): the step after a ``terminated | truncated`` one starts a new episode and its
transition spans two episodes, so the training loop marks it invalid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.core.config import ConfigError
from robot_rl.data.env_info import env_controller, env_robot
from robot_rl.rl.config import RLConfig


@dataclass(frozen=True)
class EnvSpec:
    """What the policy sees and does: flattened keys and sizes, action bounds, robot and control mode."""

    keys: tuple[str, ...]
    """Observation keys in flattening order ("state" for a Box observation)."""
    dims: tuple[int, ...]
    """Flattened size of each key."""
    low: np.ndarray
    """Lower action bounds (A,)."""
    high: np.ndarray
    """Upper action bounds (A,)."""
    robot: str
    """Embodiment name for the checkpoint ("" when the env has none)."""
    control_mode: str
    """Control mode for the checkpoint ("" when the env has none)."""
    critic_keys: tuple[str, ...] = ()
    """Keys only the critic reads, flattened after ``keys`` (``RLConfig.critic_obs_keys``)."""
    critic_dims: tuple[int, ...] = ()
    """Flattened size of each critic-only key."""
    action_index: np.ndarray | None = None
    """Entries of the env's action the policy controls (``RLConfig.action_dims``); None: all."""

    @property
    def obs_dim(self) -> int:
        """Length of the actor's flat observation."""
        return int(sum(self.dims))

    @property
    def critic_dim(self) -> int:
        """Length of the flat observation with the critic-only keys (what :meth:`flatten` returns)."""
        return self.obs_dim + int(sum(self.critic_dims))

    @property
    def env_action_dim(self) -> int:
        """Length of the env's action (the exported policy's output)."""
        return int(self.low.shape[0])

    @property
    def action_dim(self) -> int:
        """Length of the policy's action while training."""
        return self.env_action_dim if self.action_index is None else len(self.action_index)

    def flatten(self, obs: Any) -> np.ndarray:
        """A batch of observations (dict of (N, ...) arrays, or an (N, ...) array) -> (N, critic_dim) float32.

        The actor's keys come first, then the critic-only keys.
        """
        if not isinstance(obs, dict):
            arr = np.asarray(obs, dtype=np.float32)
            return arr.reshape(arr.shape[0], -1)
        pairs = zip((*self.keys, *self.critic_keys), (*self.dims, *self.critic_dims))
        parts = [np.asarray(obs[k], dtype=np.float32).reshape(-1, d) for k, d in pairs]
        return np.concatenate(parts, axis=1)

    def full_action(self, action: np.ndarray) -> np.ndarray:
        """The policy's (N, action_dim) normalised actions -> the env's (N, env_action_dim), held entries 0."""
        a = np.asarray(action, dtype=np.float64)
        if self.action_index is None:
            return a
        full = np.zeros((*a.shape[:-1], self.env_action_dim))
        full[..., self.action_index] = a
        return full

    def to_env(self, action: np.ndarray) -> np.ndarray:
        """Normalised policy actions in [-1, 1] (clipped first) -> the env's units (held entries mid-range)."""
        a = np.clip(self.full_action(action), -1.0, 1.0)
        return (self.low + (a + 1.0) * 0.5 * (self.high - self.low)).astype(np.float32)

    def to_normalised(self, action: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_env` (for ``initial_action``)."""
        return (2.0 * (np.asarray(action, dtype=np.float64) - self.low) / (self.high - self.low) - 1.0).astype(
            np.float32)

    def stats_by_key(self, mean: np.ndarray, std: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
        """Flat running statistics split per key, plus the action bounds (what the policy's normaliser fits)."""
        out: dict[str, dict[str, np.ndarray]] = {"action": {"min": self.low, "max": self.high}}
        start = 0
        for key, dim in zip(self.keys, self.dims):
            out[key] = {"mean": mean[start:start + dim], "std": std[start:start + dim]}
            start += dim
        return out


def make_probe(cfg: RLConfig) -> gym.Env:
    """One plain env of ``cfg.env_id`` (for its spaces and metadata); ConfigError when the id is unknown."""
    import robot_rl.sim  # noqa: F401  (registers the robot_rl ids)

    options = {} if cfg.vector == "batched" else dict(cfg.env_options)
    if cfg.vector == "warp":  # the device is the vector env's, not the single env's
        options.pop("device", None)
    try:
        return gym.make(cfg.env_id, **options)
    except gym.error.Error as exc:
        known = sorted(k for k in gym.registry if k.startswith("robot_rl/") and "RealStandIn" not in k)
        raise ConfigError(f"env_id: cannot make {cfg.env_id!r} ({exc}); robot_rl ids: {known}") from exc
    except TypeError as exc:
        raise ConfigError(f"env_options: {cfg.env_id} does not accept {sorted(options)} ({exc})") from exc


def env_spec(cfg: RLConfig) -> EnvSpec:
    """Check the env against the config and describe it; raises ConfigError naming the mismatch."""
    env = make_probe(cfg)
    try:
        robot, controller = env_robot(env), env_controller(env)
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
        raise ConfigError(f"env_id: {cfg.env_id} has action space {act_space}; PPO/SAC here need a 1-D Box")
    low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        raise ConfigError(f"env_id: {cfg.env_id}'s action bounds must be finite with high > low, "
                          f"got {act_space.low} .. {act_space.high}")
    if isinstance(obs_space, gym.spaces.Dict):
        spaces = dict(obs_space.spaces)
        keys = list(cfg.obs_keys) if cfg.obs_keys is not None else list(spaces)
        critic_keys = list(cfg.critic_obs_keys or [])
        both = [k for k in critic_keys if k in keys]
        if both:
            raise ConfigError(f"critic_obs_keys: {both} are in obs_keys already (the critic reads those too)")
        dims, critic_dims = _key_dims(cfg, spaces, keys, "obs_keys"), _key_dims(cfg, spaces, critic_keys,
                                                                               "critic_obs_keys")
    elif isinstance(obs_space, gym.spaces.Box) and np.issubdtype(obs_space.dtype, np.floating):
        if cfg.obs_keys not in (None, ["state"]) or cfg.critic_obs_keys:
            raise ConfigError(f"obs_keys: {cfg.env_id} has one Box observation (key 'state'), got {cfg.obs_keys} "
                              f"(critic {cfg.critic_obs_keys})")
        keys, dims, critic_keys, critic_dims = ["state"], [int(np.prod(obs_space.shape))], [], []
    else:
        raise ConfigError(f"env_id: {cfg.env_id} has observation space {obs_space}; need a float Box or a Dict")
    index = None
    if cfg.action_dims is not None:
        if max(cfg.action_dims) >= low.shape[0]:
            raise ConfigError(f"action_dims: {cfg.env_id} has {low.shape[0]} action entries, got {cfg.action_dims}")
        index = np.array(cfg.action_dims, dtype=np.intp)
    spec = EnvSpec(tuple(keys), tuple(dims), low, high, robot if robot != "unknown" else "",
                   str(controller.get("control_mode", "")), tuple(critic_keys), tuple(critic_dims), index)
    if cfg.initial_action is not None and len(cfg.initial_action) != spec.env_action_dim:
        raise ConfigError(f"initial_action: {cfg.env_id} takes {spec.env_action_dim} action values, "
                          f"got {len(cfg.initial_action)}")
    return spec


def _key_dims(cfg: RLConfig, spaces: dict[str, gym.Space], keys: list[str], name: str) -> list[int]:
    """Flattened sizes of ``keys``; ConfigError for a key the env lacks or one that is not a float vector."""
    missing = [k for k in keys if k not in spaces]
    if missing:
        raise ConfigError(f"{name}: {missing} not in {cfg.env_id}'s observation; it has {list(spaces)}")
    dims = []
    for key in keys:
        sub = spaces[key]
        if not isinstance(sub, gym.spaces.Box) or not np.issubdtype(sub.dtype, np.floating):
            raise ConfigError(f"{name}: {key!r} is {sub}; the MLP policy takes float vectors only "
                              f"(leave images out with obs_keys)")
        dims.append(int(np.prod(sub.shape)))
    return dims


def make_vector(cfg: RLConfig, num_envs: int) -> gym.vector.VectorEnv:
    """``num_envs`` copies as ``cfg.vector`` says (robot_rl.sim.vector.make_vector_env)."""
    from robot_rl.sim.vector import make_vector_env

    try:
        return make_vector_env(cfg.env_id, num_envs, asynchronous=cfg.vector == "async",
                               batched=cfg.vector == "batched", threaded=cfg.vector == "threaded",
                               warp=cfg.vector == "warp", processes=cfg.processes,
                               **cfg.env_options)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"vector / env_options: cannot build {num_envs} x {cfg.env_id} ({exc})") from exc


def check_spaces(env: gym.vector.VectorEnv, spec: EnvSpec, cfg: RLConfig) -> None:
    """The vector env's single spaces agree with the probe's (a batched version could drift from the env)."""
    act = env.single_action_space
    if not isinstance(act, gym.spaces.Box) or act.shape != (spec.env_action_dim,) or not (
            np.allclose(act.low, spec.low) and np.allclose(act.high, spec.high)):
        raise ConfigError(f"vector: {cfg.vector} {cfg.env_id} has action space {act}, the env has "
                          f"Box({spec.low}, {spec.high})")
    obs = env.single_observation_space
    if isinstance(obs, gym.spaces.Dict):
        for key, dim in zip((*spec.keys, *spec.critic_keys), (*spec.dims, *spec.critic_dims)):
            sub = obs.spaces.get(key)
            if not isinstance(sub, gym.spaces.Box) or int(np.prod(sub.shape)) != dim:
                raise ConfigError(f"vector: {cfg.vector} {cfg.env_id}'s observation {key!r} is {sub}, the env's "
                                  f"has {dim} values")
