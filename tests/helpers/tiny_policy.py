"""A tiny FlowPolicy trained in seconds on an expert's steps in an env, for graph tests that need a real one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.data.env_info import env_controller, env_robot
from robot_rl.policies.chunking import ExecutorConfig
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.training.dataset import ChunkDataset


def train_tiny_policy(env_id: str, expert: Any, keys: Sequence[str], steps: int = 60, updates: int = 40,
                      seed: int = 0) -> FlowPolicy:
    """Record ``steps`` expert steps in ``env_id``, fit ``updates`` gradient steps; robot + control mode in its spec."""
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
        if terminated or truncated:
            ends.append(i + 1)
            obs, _ = env.reset(seed=seed + i)
    if not ends or ends[-1] != steps:
        ends.append(steps)
    robot, mode = env_robot(env), str(env_controller(env)["control_mode"])
    env.close()
    data = ChunkDataset({k: np.stack(v) for k, v in columns.items()}, np.stack(actions).astype(np.float32),
                        np.array(ends), ["" for _ in ends], [], n_obs_steps=2, horizon=16, robot=robot,
                        control_mode=mode)
    torch.manual_seed(seed)
    policy = FlowPolicy(FlowConfig(horizon=16, unet_channels=(32, 64), num_inference_steps=4,
                                   executor=ExecutorConfig(n_action_steps=8)), data.spec)
    policy.set_stats(data.stats())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    rng = np.random.default_rng(seed)
    policy.train()
    for _ in range(updates):
        loss, _ = policy.compute_loss(data.sample(32, rng))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return policy.eval()
