"""Small policies trained in seconds on an expert's steps in an env, for graph tests that need a real one.

``train_tiny_policy``: a FlowPolicy (chunked, the imitation path) fitted for a few updates; it streams
plausible targets but does not solve the task. ``train_hovering_mlp``: behaviour cloning of the hover expert
into a one-step MLP policy (the class RL exports), ~4 s on one core, that flies to its goal and holds it
within millimetres in its own env; for tests that check a policy really flies a (emulated) vehicle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.data.env_info import env_controller, env_robot
from robot_rl.policies.base import Policy
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.training.dataset import ChunkDataset


def expert_dataset(env_id: str, expert: Any, keys: Sequence[str], steps: int, seed: int = 0,
                   episode_steps: int | None = None, n_obs_steps: int = 2, horizon: int = 16) -> ChunkDataset:
    """``steps`` expert steps in ``env_id`` (new episode every ``episode_steps``); robot + control mode in its spec."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    columns: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    actions, ends = [], []
    for i in range(steps):
        action = expert.act(obs)
        for k in keys:
            columns[k].append(np.asarray(obs[k], np.float32).reshape(-1))
        actions.append(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated or (episode_steps is not None and (i + 1) % episode_steps == 0):
            ends.append(i + 1)
            obs, _ = env.reset(seed=seed + i)
    if not ends or ends[-1] != steps:
        ends.append(steps)
    robot, mode = env_robot(env), str(env_controller(env)["control_mode"])
    env.close()
    return ChunkDataset({k: np.stack(v) for k, v in columns.items()}, np.stack(actions).astype(np.float32),
                        np.array(ends), ["" for _ in ends], [], n_obs_steps=n_obs_steps, horizon=horizon,
                        robot=robot, control_mode=mode)


def _fit(policy: Policy, data: ChunkDataset, updates: int, lr: float, batch: int, seed: int) -> Policy:
    policy.set_stats(data.stats())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    policy.train()
    for _ in range(updates):
        loss, _ = policy.compute_loss(data.sample(batch, rng))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return policy.eval()


def train_tiny_policy(env_id: str, expert: Any, keys: Sequence[str], steps: int = 60, updates: int = 40,
                      seed: int = 0) -> FlowPolicy:
    """Record ``steps`` expert steps in ``env_id``, fit ``updates`` gradient steps of a small FlowPolicy."""
    data = expert_dataset(env_id, expert, keys, steps, seed)
    torch.manual_seed(seed)
    policy = FlowPolicy(FlowConfig(horizon=16, unet_channels=(32, 64), num_inference_steps=4,
                                   executor=ExecutorConfig(n_action_steps=8)), data.spec)
    _fit(policy, data, updates, 1e-3, 32, seed)
    return policy


def train_hovering_mlp(env_id: str, expert: Any, keys: Sequence[str], steps: int = 1500, updates: int = 1500,
                       seed: int = 0) -> MLPPolicy:
    """Behaviour-clone ``expert`` into a (64, 64) MLP policy from 100-step episodes of ``env_id``."""
    data = expert_dataset(env_id, expert, keys, steps, seed, episode_steps=100, n_obs_steps=1, horizon=1)
    torch.manual_seed(seed)
    policy = MLPPolicy(MLPConfig(hidden=(64, 64)), data.spec)
    _fit(policy, data, updates, 3e-3, 256, seed)
    return policy
