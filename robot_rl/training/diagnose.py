"""Offline diagnosis of an imitation policy: how well its first action matches the demonstration, by step.

A policy that sees the task only through its cameras can learn the "copycat" shortcut (Wen et al.,
"Fighting Copycat Agents in Behavioral Cloning from Observation Histories", NeurIPS 2020): it continues
the motion its proprioceptive history already shows instead of finding the object in the image. Offline
that shows as a first-action error that is large at the episode start (the hand at home, only the
cameras know where the object is) and small a few steps later (the history carries the answer).
:func:`first_action_error` measures it on held-out demonstrations, so a fix can be checked before any
closed-loop evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from robot_rl.policies.base import Policy
from robot_rl.training.dataset import ChunkDataset


@dataclass(frozen=True)
class FirstActionError:
    """Mean absolute error of the first predicted action, in the policy's normalised action units [-1, 1]."""

    step: int
    """Steps after the episode start the chunks were predicted at."""
    error: np.ndarray
    """Per action dimension, averaged over episodes."""
    episodes: int
    """Episodes averaged."""
    per_episode: np.ndarray | None = None
    """(episodes, action dims): each episode's error, so it can be split (e.g. by task)."""

    def summary(self, dims: Sequence[int] = (0, 1)) -> str:
        """One line: the mean error over ``dims`` (x/y of a Cartesian action by default)."""
        return f"step {self.step:3d}: first-action error {float(self.error[list(dims)].mean()):.3f} " \
               f"(dims {list(dims)}, {self.episodes} episodes)"


@torch.no_grad()
def first_action_error(policy: Policy, data: ChunkDataset, steps: Sequence[int] = (0, 10),
                       seed: int = 0, num_steps: int | None = None) -> list[FirstActionError]:
    """For each offset in ``steps``: |first action of the predicted chunk - the demonstrated action| per dim.

    ``num_steps``: sampling steps (the policy's own by default). A one-step sample is the mean of what the
    demonstrations did in that situation; where they split two ways (a cube turned 45 deg can be grasped
    turning left or right) that mean is neither, and only several steps pick one of them.
    """
    out = []
    generator = torch.Generator().manual_seed(seed)
    for step in steps:
        idx = np.minimum(data.starts + step, data.ends - 1)
        batch = data.batch(idx)
        obs = {k: batch["obs"][k].numpy() for k in (*policy.state_keys, *policy.image_keys)}
        chunk = policy.predict_chunk(obs, num_steps=num_steps, generator=generator, task=batch["task"])
        predicted = policy.normalizer.normalize("action", torch.as_tensor(chunk[:, 0]).float())
        demo = policy.normalizer.normalize("action", batch["action"][:, 0].float())
        per_episode = (predicted - demo).abs().numpy()
        out.append(FirstActionError(int(step), per_episode.mean(axis=0), len(idx), per_episode))
    return out
