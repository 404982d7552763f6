"""The Transition record: one control step as every learner, buffer and dataset stores it.

Besides the usual (obs, action, reward, next_obs, terminated, truncated) it keeps what online
fine-tuning with humans needs:

* ``action`` is what the robot *executed*, ``policy_action`` what the policy proposed at that step and
  ``base_action`` what a frozen base policy proposed (residual RL learns ``action - base_action``);
* ``is_intervention`` and ``segment_source`` say who was in control (policy, human or a script) and
  ``segment_id`` groups consecutive steps under one controller, so credit can go to the right segment;
* ``policy_version`` says which weights acted, so stale off-policy data can be recognised;
* ``obs_stamp`` / ``next_obs_stamp`` are sensor times in seconds.

Construction checks everything and raises :class:`~robot_rl.core.spaces.SpecError` naming the field.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from robot_rl.core.spaces import ActionSpec, ObservationSpec, SpecError, check_array


class SegmentSource(str, enum.Enum):
    """Who produced the executed action."""

    POLICY = "policy"
    HUMAN = "human"
    SCRIPTED = "scripted"


_ACTION_FIELDS = ("action", "policy_action", "base_action")


@dataclass(frozen=True)
class Transition:
    """One step (s, a, r, s') with intervention and provenance metadata. Immutable and validated."""

    observation: Mapping[str, np.ndarray]
    """Observation before the step: proprioception fields and uint8 camera images."""
    next_observation: Mapping[str, np.ndarray]
    """Observation after the step; same fields, shapes and dtypes as ``observation``."""
    action: np.ndarray
    """Action actually executed (after human override and safety clipping), float32 (A,)."""
    reward: float
    """Reward for this step (finite)."""
    terminated: bool
    """The episode ended in a terminal state (success or failure); no bootstrapping past it."""
    truncated: bool
    """The episode was cut (time limit, diverged sim, e-stop); bootstrap from ``next_observation``."""
    episode_id: int
    """Episode this step belongs to (>= 0)."""
    step: int
    """Index of this step within its episode (>= 0)."""
    policy_action: np.ndarray | None = None
    """What the policy proposed at this step, float32 (A,); None when no policy ran."""
    base_action: np.ndarray | None = None
    """What the frozen base policy proposed (residual RL), float32 (A,); None without a base policy."""
    is_intervention: bool = False
    """A human overrode the policy at this step."""
    segment_source: SegmentSource = SegmentSource.POLICY
    """Who produced ``action``."""
    segment_id: int = 0
    """Consecutive steps with the same controller share an id (>= 0)."""
    policy_version: int = -1
    """Version of the policy weights that acted (-1: none or unknown)."""
    obs_stamp: float = 0.0
    """Time of ``observation`` in seconds (sensor or sim time)."""
    next_obs_stamp: float = 0.0
    """Time of ``next_observation`` in seconds (>= ``obs_stamp``)."""
    task: int = 0
    """Which of a fleet's tasks produced the step (index into ``fleet.tasks``; 0 in a single-task run): the
    learner balances its batches over tasks and reports per task."""

    def __post_init__(self) -> None:
        obs = _check_obs("observation", self.observation)
        nxt = _check_obs("next_observation", self.next_observation)
        for key, value in obs.items():
            other = nxt.get(key)
            if other is None:
                raise SpecError(f"next_observation: missing field {key!r} present in observation")
            if other.shape != value.shape or other.dtype != value.dtype:
                raise SpecError(
                    f"next_observation.{key}: shape/dtype {other.shape}/{other.dtype.name} differ from "
                    f"observation.{key} {value.shape}/{value.dtype.name}"
                )
        if set(nxt) != set(obs):
            raise SpecError(f"next_observation: unexpected fields {sorted(set(nxt) - set(obs))}")

        action = check_array("action", self.action, None, np.dtype(np.float32))
        if action.ndim != 1:
            raise SpecError(f"action: expected a 1-D array, got shape {action.shape}")
        for name in _ACTION_FIELDS[1:]:
            value = getattr(self, name)
            if value is not None:
                check_array(name, value, action.shape, np.dtype(np.float32))

        _check_scalar("reward", self.reward, float)
        for name in ("terminated", "truncated", "is_intervention"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise SpecError(f"{name}: expected a bool, got {type(getattr(self, name)).__name__}")
            object.__setattr__(self, name, bool(getattr(self, name)))
        for name in ("episode_id", "step", "segment_id"):
            _check_scalar(name, getattr(self, name), int, minimum=0)
        _check_scalar("policy_version", self.policy_version, int, minimum=-1)
        _check_scalar("obs_stamp", self.obs_stamp, float)
        _check_scalar("next_obs_stamp", self.next_obs_stamp, float)
        if self.next_obs_stamp < self.obs_stamp:
            raise SpecError(f"next_obs_stamp: {self.next_obs_stamp} is earlier than obs_stamp {self.obs_stamp}")
        try:
            object.__setattr__(self, "segment_source", SegmentSource(self.segment_source))
        except ValueError:
            raise SpecError(
                f"segment_source: expected one of {[s.value for s in SegmentSource]}, got {self.segment_source!r}"
            ) from None
        if self.is_intervention and self.segment_source is not SegmentSource.HUMAN:
            raise SpecError(f"segment_source: an intervention step must be 'human', got {self.segment_source.value!r}")

    def check_spec(self, observation_spec: ObservationSpec, action_spec: ActionSpec) -> Transition:
        """Check the observation and action against a robot's specs (exact fields, shapes, dtypes)."""
        observation_spec.check(self.observation, prefix="observation.")
        observation_spec.check(self.next_observation, prefix="next_observation.")
        for name in _ACTION_FIELDS:
            value = getattr(self, name)
            if value is not None and value.shape != (action_spec.dim,):
                raise SpecError(f"{name}: expected shape ({action_spec.dim},) from the action spec, got {value.shape}")
        return self

    @classmethod
    def trusted(cls, **values: Any) -> Transition:
        """A step from values already checked as a whole (robot_rl.learners.buffers.check_columns), unchecked.

        Every field must be given, with the types ``__post_init__`` would leave (Python bools, ints and floats,
        numpy arrays, a SegmentSource).
        """
        obj = object.__new__(cls)
        obj.__dict__.update(values)
        return obj

    def replace(self, **changes: Any) -> Transition:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Transition(**values)


def _check_obs(name: str, obs: Any) -> dict[str, np.ndarray]:
    if not isinstance(obs, Mapping) or not obs:
        raise SpecError(f"{name}: expected a non-empty dict of arrays, got {type(obs).__name__}")
    return {k: check_array(f"{name}.{k}", v, None, None) for k, v in obs.items()}


def _check_scalar(name: str, value: Any, kind: type, minimum: float | None = None) -> None:
    ok_types: tuple[type, ...] = (int, np.integer) if kind is int else (int, float, np.integer, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, ok_types):
        raise SpecError(f"{name}: expected {kind.__name__}, got {type(value).__name__}")
    value = float(np.asarray(value))
    if not np.isfinite(value):
        raise SpecError(f"{name}: must be finite, got {value}")
    if minimum is not None and value < minimum:
        raise SpecError(f"{name}: must be >= {minimum}, got {value}")
