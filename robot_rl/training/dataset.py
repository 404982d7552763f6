"""Training windows from an episode store: observation history and action chunk around every step.

The whole dataset is read into memory once (state-only pick-and-lift with 100 demos is a few MB; small
camera images are a few hundred MB), then batches are gathered with numpy indexing. A window never
crosses an episode boundary: observations before the episode start repeat the first frame and actions
past the end repeat the last action, as in diffusion_policy's sequence sampler. Segments that end before
the robot stopped (``open_ends``: a human handing control back) mark those actions in ``action_is_pad``
instead, and the policies leave them out of the loss (:mod:`robot_rl.policies.losses`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.data.schema import DatasetError
from robot_rl.data.stats import compute_stats
from robot_rl.data.store import EpisodeStore
from robot_rl.policies.base import PolicySpec
from robot_rl.training.labels import label_columns


class ChunkDataset:
    """In-memory episodes with window sampling; ``batch(indices)`` gives the policies' batch layout."""

    def __init__(self, columns: dict[str, np.ndarray], actions: np.ndarray, episode_ends: np.ndarray,
                 tasks: Sequence[str], image_keys: Sequence[str], n_obs_steps: int, horizon: int,
                 robot: str = "", control_mode: str = "", aux_keys: Sequence[str] = (),
                 open_ends: Sequence[bool] | np.ndarray | None = None) -> None:
        self.columns, self.actions = columns, actions
        self.aux_keys = list(aux_keys)  # privileged labels: in the batches, not in the policy's state
        missing = [k for k in self.aux_keys if k not in columns]
        if missing:
            raise DatasetError(f"aux_keys {missing}: not among the loaded columns {sorted(columns)}")
        self.robot, self.control_mode = robot, control_mode  # how the actions were executed: saved in the spec
        self.ends = np.asarray(episode_ends, dtype=np.int64)
        self.starts = np.concatenate([[0], self.ends[:-1]])
        self.tasks = list(tasks)
        self.image_keys = list(image_keys)
        self.n_obs_steps, self.horizon = n_obs_steps, horizon
        n = len(actions)
        if self.ends.size == 0 or self.ends[-1] != n:
            raise DatasetError(f"episode ends {self.ends[-3:].tolist()} do not cover the {n} frames")
        for key, values in columns.items():
            if len(values) != n:
                raise DatasetError(f"observation.{key}: {len(values)} frames, the actions have {n}")
        if not np.all(np.isfinite(actions)):
            raise DatasetError("action: contains NaN or inf; clean the dataset before training")
        self.episode_of = np.repeat(np.arange(self.ends.size), self.ends - self.starts)
        self.open_ends = np.zeros(self.ends.size, bool) if open_ends is None else np.asarray(open_ends, bool)
        """Per episode: True when its recorded actions stop while the robot went on (what follows is no label)."""
        if self.open_ends.shape != self.ends.shape:
            raise DatasetError(f"open_ends: {self.open_ends.size} flags for {self.ends.size} episodes")

    @classmethod
    def from_store(cls, path: str | Path, state_keys: Sequence[str] | None, image_keys: Sequence[str],
                   n_obs_steps: int, horizon: int, max_episodes: int | None = None,
                   aux_keys: Sequence[str] = ()) -> ChunkDataset:
        """Read the first ``max_episodes`` committed episodes of a store (all when None).

        ``aux_keys`` are privileged labels for an auxiliary head, loaded beside the state but never part of it:
        stored fields, or labels of :data:`robot_rl.training.labels.DERIVED_LABELS` computed from stored fields.
        """
        with EpisodeStore.open(path, mode="r") as store:
            schema = store.schema
            if schema is None or store.num_episodes == 0:
                raise DatasetError(f"{path}: the store has no episodes")
            keys = list(state_keys) if state_keys is not None else schema.state_keys
            keys = [k for k in keys if k not in aux_keys]
            for key in [*keys, *image_keys]:
                if key not in schema.observation:
                    raise DatasetError(f"{path}: no observation key {key!r} (have {sorted(schema.observation)})")
            for key in image_keys:
                if key not in schema.image_keys:
                    raise DatasetError(f"{path}: observation.{key} is not an image")
            count = store.num_episodes if max_episodes is None else min(max_episodes, store.num_episodes)
            stop = int(store.episode_ends[count - 1])
            columns: dict[str, np.ndarray] = {}
            for key in keys:
                columns[key] = np.asarray(store.array(f"observation.{key}")[:stop], dtype=np.float32).reshape(stop, -1)
            for key in image_keys:
                columns[key] = np.asarray(store.array(f"observation.{key}")[:stop])
            labels = label_columns(  # stored or derived from stored fields; the sources stay out of the state
                aux_keys, lambda k: np.asarray(store.array(f"observation.{k}")[:stop]) if k in schema.observation
                else None, stop)
            missing = [k for k in aux_keys if k not in labels]
            if missing:
                raise DatasetError(f"{path}: aux_keys {missing}: neither stored nor derivable from the stored fields "
                                   f"(have {sorted(schema.observation)})")
            columns.update(labels)
            actions = np.asarray(store.array("action")[:stop], dtype=np.float32)
            tasks = [store.episode_info(i).task for i in range(count)]
            robot = "" if store.info.robot == "unknown" else store.info.robot
            mode = str(store.info.controller.get("control_mode", ""))
            return cls(columns, actions, store.episode_ends[:count], tasks, image_keys, n_obs_steps, horizon,
                       robot, mode, aux_keys)

    @property
    def spec(self) -> PolicySpec:
        """State sizes, image shapes and action size, for building a policy."""
        return PolicySpec(
            state_dims={k: int(v.shape[1]) for k, v in self.columns.items()
                        if k not in self.image_keys and k not in self.aux_keys},
            image_shapes={k: tuple(self.columns[k].shape[1:]) for k in self.image_keys},
            action_dim=int(self.actions.shape[1]), robot=self.robot, control_mode=self.control_mode,
            aux_dims={k: int(self.columns[k].reshape(len(self.actions), -1).shape[1]) for k in self.aux_keys})

    @property
    def num_episodes(self) -> int:
        """Episodes held."""
        return int(self.ends.size)

    def __len__(self) -> int:
        return len(self.actions)

    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """min/max/mean/std of the actions and every state key (what the policy normaliser needs)."""
        batch = {"action": self.actions, **{k: v for k, v in self.columns.items() if k not in self.image_keys}}
        return compute_stats([batch])

    def batch(self, indices: np.ndarray) -> dict[str, Any]:
        """Windows at frames ``indices``: obs (B, To, ...), action (B, H, A), task list.

        With open-ended episodes, also ``action_is_pad`` (B, H): the chunk steps past such an episode's end.
        """
        idx = np.asarray(indices, dtype=np.int64)
        ep = self.episode_of[idx]
        start, end = self.starts[ep], self.ends[ep]
        obs_idx = np.maximum(idx[:, None] + np.arange(-self.n_obs_steps + 1, 1), start[:, None])
        ahead = idx[:, None] + np.arange(self.horizon)
        act_idx = np.minimum(ahead, end[:, None] - 1)
        obs = {k: torch.from_numpy(v[obs_idx]) for k, v in self.columns.items()}
        out = {"obs": obs, "action": torch.from_numpy(self.actions[act_idx]), "task": [self.tasks[e] for e in ep]}
        if self.open_ends.any():
            out["action_is_pad"] = torch.from_numpy((ahead >= end[:, None]) & self.open_ends[ep][:, None])
        return out

    def sample(self, batch_size: int, rng: np.random.Generator, start_fraction: float = 0.0,
               start_steps: int = 10) -> dict[str, Any]:
        """A random batch of windows: uniform, except ``start_fraction`` of it from episode starts.

        Those windows begin in an episode's first ``start_steps`` frames, where a policy that sees the task only
        through its cameras must find the object in the images (later, its own motion already says where to
        go); uniform sampling gives them ``start_steps / episode length`` of the batch.
        """
        n_start = round(batch_size * start_fraction)
        idx = rng.integers(0, len(self), size=batch_size - n_start)
        if n_start:
            ep = rng.integers(0, self.num_episodes, size=n_start)
            span = np.minimum(start_steps, self.ends[ep] - self.starts[ep])
            idx = np.concatenate([idx, self.starts[ep] + (rng.random(n_start) * span).astype(np.int64)])
        return self.batch(idx)
