"""What an episode store holds: dataset metadata and the per-step column layout.

A store keeps one row per step, time-major, in these columns (``data/<column>``):

* ``observation.<key>`` for every observation field (images as uint8 (H, W, C));
* ``action``, ``policy_action``, ``base_action`` (float32; NaN rows mean "not proposed");
* ``reward``, ``obs_stamp``, ``next_obs_stamp`` (float64); ``terminated``, ``truncated``,
  ``is_intervention`` (bool); ``segment_source`` (uint8 index into :data:`SEGMENT_SOURCES`);
  ``segment_id``, ``policy_version`` (int64).

``next_observation`` is not stored per step: within an episode it equals the next step's
observation (the writer checks this), and the last one is kept per episode in
``meta/final_observation.<key>``. That halves image storage and still restores every Transition exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robot_rl.core.spaces import ActionSpec, FieldSpec, ObservationSpec, SpecError
from robot_rl.core.transition import SegmentSource

FORMAT_NAME = "robot_rl.episodes"
FORMAT_VERSION = 1
SEGMENT_SOURCES: tuple[str, ...] = tuple(s.value for s in SegmentSource)
_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

# Per-step scalar columns: name -> dtype.
SCALAR_COLUMNS: dict[str, np.dtype] = {
    "reward": np.dtype(np.float64),
    "terminated": np.dtype(np.bool_),
    "truncated": np.dtype(np.bool_),
    "is_intervention": np.dtype(np.bool_),
    "segment_source": np.dtype(np.uint8),
    "segment_id": np.dtype(np.int64),
    "policy_version": np.dtype(np.int64),
    "obs_stamp": np.dtype(np.float64),
    "next_obs_stamp": np.dtype(np.float64),
}
ACTION_COLUMNS = ("action", "policy_action", "base_action")
# Per-episode columns (``meta/<name>``); ``episode_ends`` is written last and commits the episode.
EPISODE_COLUMNS: dict[str, np.dtype] = {
    "episode_id": np.dtype(np.int64),
    "task_index": np.dtype(np.int64),
    "success": np.dtype(np.int8),  # -1 unknown, 0 failure, 1 success
}


class DatasetError(ValueError):
    """A store is missing, corrupt or misused; the message names the episode and field when known."""


@dataclass
class DatasetInfo:
    """Metadata of a whole dataset, stored in the store's attributes."""

    robot: str = "unknown"
    """Robot name (e.g. "panda"), as in ``robot_rl.robots.assets``."""
    fps: float = 10.0
    """Control rate the steps were recorded at, in Hz."""
    task: str = ""
    """Default task text for episodes recorded without their own."""
    controller: dict[str, Any] = field(default_factory=dict)
    """Controller configuration in force while recording (type, gains, limits)."""
    cameras: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Camera name -> its configuration (resolution, fov, mounting)."""
    source: str = ""
    """Where the data came from (sim env id, bag path, teleop device)."""

    def __post_init__(self) -> None:
        if not np.isfinite(self.fps) or self.fps <= 0:
            raise ValueError(f"fps: must be a positive number, got {self.fps}")
        if not self.robot:
            raise ValueError("robot: must not be empty")


@dataclass(frozen=True)
class StepSchema:
    """Shapes and dtypes of the observation fields and the action length."""

    observation: dict[str, FieldSpec]
    """Observation key -> shape and dtype (images are uint8 (H, W, C))."""
    action_dim: int
    """Length of the action vectors."""

    def __post_init__(self) -> None:
        if not self.observation:
            raise SpecError("observation: a schema needs at least one field")
        for key in self.observation:
            if not _KEY.match(key):
                raise SpecError(f"observation.{key}: keys may hold letters, digits, '_', '.', '-' only")
        if self.action_dim <= 0:
            raise SpecError(f"action: dimension must be positive, got {self.action_dim}")

    @property
    def image_keys(self) -> list[str]:
        """Observation keys holding uint8 (H, W, C) images."""
        return [k for k, f in self.observation.items() if f.is_image]

    @property
    def state_keys(self) -> list[str]:
        """Observation keys that are not images."""
        return [k for k, f in self.observation.items() if not f.is_image]

    def columns(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every per-step column: name -> (shape of one step, dtype)."""
        cols: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            f"observation.{k}": (f.shape, f.np_dtype) for k, f in self.observation.items()
        }
        for name in ACTION_COLUMNS:
            cols[name] = ((self.action_dim,), np.dtype(np.float32))
        cols.update({name: ((), dt) for name, dt in SCALAR_COLUMNS.items()})
        return cols

    def to_json(self) -> dict[str, Any]:
        """JSON-safe form for the store attributes."""
        return {
            "observation": {k: {"shape": list(f.shape), "dtype": f.dtype} for k, f in self.observation.items()},
            "action_dim": self.action_dim,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepSchema:
        """Inverse of :meth:`to_json`; raises DatasetError on a malformed schema."""
        try:
            obs = {k: FieldSpec(shape=tuple(v["shape"]), dtype=str(v["dtype"])) for k, v in data["observation"].items()}
            return cls(observation=obs, action_dim=int(data["action_dim"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DatasetError(f"schema: malformed schema in store attributes ({exc!r})") from exc

    @classmethod
    def from_specs(cls, observation: ObservationSpec, action: ActionSpec) -> StepSchema:
        """The schema of a robot's specs; create a store with it so no array is created mid-recording."""
        fields = {k: FieldSpec(shape=f.shape, dtype=f.dtype) for k, f in observation.items()}
        return cls(observation=fields, action_dim=action.dim)

    @classmethod
    def from_observation(cls, observation: Mapping[str, np.ndarray], action: np.ndarray) -> StepSchema:
        """The schema of one observation dict and action vector."""
        obs = {k: FieldSpec(shape=tuple(np.shape(v)) or (1,), dtype=np.asarray(v).dtype.name)
               for k, v in observation.items()}
        for k, v in observation.items():
            if np.ndim(v) == 0:
                raise SpecError(f"observation.{k}: scalars must be stored as shape (1,) arrays")
        return cls(observation=obs, action_dim=int(np.shape(action)[0]))
