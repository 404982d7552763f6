"""Transitions as named columns and as safetensors bytes: the one wire and storage form of a batch of steps.

A batch of :class:`~robot_rl.core.transition.Transition` records becomes one array per field
(``obs.<k>``, ``next_obs.<k>``, ``action``, scalars), which the replay buffers store and the fleet sends
(:func:`encode_transitions`; never pickle). What a peer sends is checked a column at a time
(:func:`check_columns`) before any record is built.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from safetensors.numpy import load, save

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import SegmentSource, Transition

SOURCES = tuple(SegmentSource)
"""Code (index) -> segment source, as stored in the ``source`` column."""

SCALARS: dict[str, str] = {
    "reward": "float64", "terminated": "bool", "truncated": "bool", "is_intervention": "bool",
    "source": "uint8", "episode_id": "int64", "step": "int64", "segment_id": "int64", "policy_version": "int64",
    "obs_stamp": "float64", "next_obs_stamp": "float64", "has_policy_action": "bool", "has_base_action": "bool",
    "task": "int64",
}
OPTIONAL = {"task"}
"""Columns that payloads and buffers written before they existed may lack (read as zeros)."""


def transitions_to_columns(transitions: Sequence[Transition]) -> dict[str, np.ndarray]:
    """Stack transitions into named columns (``obs.<k>``, ``next_obs.<k>``, ``action``, scalars)."""
    if not transitions:
        raise ValueError("transitions_to_columns: no transitions")
    first = transitions[0]
    zeros = np.zeros_like(first.action)
    cols: dict[str, np.ndarray] = {}
    for key in first.observation:
        cols[f"obs.{key}"] = np.stack([t.observation[key] for t in transitions])
        cols[f"next_obs.{key}"] = np.stack([t.next_observation[key] for t in transitions])
    cols["action"] = np.stack([t.action for t in transitions])
    cols["policy_action"] = np.stack([zeros if t.policy_action is None else t.policy_action for t in transitions])
    cols["base_action"] = np.stack([zeros if t.base_action is None else t.base_action for t in transitions])
    rows = {
        "reward": [t.reward for t in transitions], "terminated": [t.terminated for t in transitions],
        "truncated": [t.truncated for t in transitions], "is_intervention": [t.is_intervention for t in transitions],
        "source": [SOURCES.index(t.segment_source) for t in transitions],
        "episode_id": [t.episode_id for t in transitions], "step": [t.step for t in transitions],
        "segment_id": [t.segment_id for t in transitions], "policy_version": [t.policy_version for t in transitions],
        "obs_stamp": [t.obs_stamp for t in transitions], "next_obs_stamp": [t.next_obs_stamp for t in transitions],
        "has_policy_action": [t.policy_action is not None for t in transitions],
        "has_base_action": [t.base_action is not None for t in transitions],
        "task": [t.task for t in transitions],
    }
    for name, values in rows.items():
        cols[name] = np.asarray(values, dtype=SCALARS[name])
    return cols


def _where(cols: dict[str, np.ndarray], col: np.ndarray) -> str:
    """" in episode E at step S" for the first bad row (what an operator looks up), "" without usable ids.

    Called on a column already found bad, before the id columns are checked: any shape or dtype may reach it.
    """
    episode, step = cols.get("episode_id"), cols.get("step")
    if col.ndim == 0 or not all(isinstance(ids, np.ndarray) and ids.ndim == 1 and len(ids) == len(col)
                                for ids in (episode, step)):
        return ""
    assert episode is not None and step is not None
    bad = np.flatnonzero(~np.isfinite(col.reshape(len(col), -1)).all(axis=1))
    try:
        episodes = sorted({int(e) for e in episode[bad]})
        return f" in episode {episodes[0]} at step {int(step[bad[0]])} ({len(bad)} row(s), episodes {episodes})"
    except (IndexError, TypeError, ValueError, OverflowError):  # no bad row, or ids that are not integers
        return ""


def check_columns(cols: dict[str, np.ndarray]) -> list[str]:
    """Check transition columns as :class:`Transition` checks one step, but a column at a time; returns the obs keys.

    What a peer sends is checked here before any row exists: the same fields, one length, the dtypes of
    :func:`transitions_to_columns`, finite floats, non-negative ids, ordered stamps, known sources, human
    interventions. Raises SpecError naming the column.
    """
    keys = [k[4:] for k in cols if k.startswith("obs.")]
    missing = [n for n in ("action", "policy_action", "base_action", *SCALARS) if n not in cols and n not in OPTIONAL]
    if missing or not keys:
        raise SpecError(f"transition columns: missing {missing or ['obs.*']}")
    extra = [k for k in cols if k.startswith("next_obs.") and k[9:] not in keys]
    if extra or any(f"next_obs.{k}" not in cols for k in keys):
        raise SpecError(f"transition columns: observation and next_observation fields differ ({extra})")
    n = len(cols["action"]) if np.ndim(cols["action"]) else -1  # a scalar is no column (len() would raise)
    for name, col in cols.items():
        if not isinstance(col, np.ndarray) or not col.ndim or len(col) != n:
            raise SpecError(f"{name}: expected {n} rows")
        if col.dtype.kind not in "biuf":
            raise SpecError(f"{name}: expected a numeric or bool array, got dtype {col.dtype.name}")
        if col.dtype.kind == "f" and not np.isfinite(col).all():
            raise SpecError(f"{name}: contains non-finite value(s) (NaN or inf){_where(cols, col)}")
    for k in keys:
        a, b = cols[f"obs.{k}"], cols[f"next_obs.{k}"]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise SpecError(f"next_observation.{k}: shape/dtype {b.shape[1:]}/{b.dtype.name} differ from "
                            f"observation.{k} "
                            f"{a.shape[1:]}/{a.dtype.name}")
    action = cols["action"]
    if action.ndim != 2 or action.dtype != np.float32:
        raise SpecError(f"action: expected float32 rows of a 1-D array, got {action.dtype.name} {action.shape[1:]}")
    for name in ("policy_action", "base_action"):
        if cols[name].shape != action.shape or cols[name].dtype != np.float32:
            raise SpecError(f"{name}: expected float32 {action.shape[1:]}, got {cols[name].dtype.name} "
                            f"{cols[name].shape[1:]}")
    for name, dtype in SCALARS.items():
        if name in cols and (cols[name].dtype != np.dtype(dtype) or cols[name].ndim != 1):
            raise SpecError(f"{name}: expected one {dtype} per row, got {cols[name].dtype.name} {cols[name].shape[1:]}")
    for name, low in (("episode_id", 0), ("step", 0), ("segment_id", 0), ("policy_version", -1), ("task", 0)):
        if name in cols and n and cols[name].min() < low:
            raise SpecError(f"{name}: must be >= {low}, got {cols[name].min()}")
    if (cols["next_obs_stamp"] < cols["obs_stamp"]).any():
        raise SpecError("next_obs_stamp: earlier than obs_stamp")
    if n and cols["source"].max() >= len(SOURCES):
        raise SpecError(f"source: unknown code {cols['source'].max()}")
    human = SOURCES.index(SegmentSource.HUMAN)
    if (cols["is_intervention"] & (cols["source"] != human)).any():
        raise SpecError("segment_source: an intervention step must be 'human'")
    return keys


def columns_to_transitions(cols: dict[str, np.ndarray]) -> list[Transition]:
    """Inverse of :func:`transitions_to_columns`; the columns are checked first (:func:`check_columns`).

    Rows are then built without checking each again (the per-step check costs ~30 us, 30x the rest: a
    learner decoding 50 000 steps/s could not afford it).
    """
    keys = check_columns(cols)
    has_task = "task" in cols
    py = {name: cols[name].tolist() for name in SCALARS if name in cols}
    obs = {k: cols[f"obs.{k}"] for k in keys}
    nxt = {k: cols[f"next_obs.{k}"] for k in keys}
    action, policy_action, base_action = cols["action"], cols["policy_action"], cols["base_action"]
    out = []
    for i in range(len(action)):
        out.append(Transition.trusted(
            observation={k: v[i] for k, v in obs.items()}, next_observation={k: v[i] for k, v in nxt.items()},
            action=action[i], reward=py["reward"][i], terminated=py["terminated"][i], truncated=py["truncated"][i],
            episode_id=py["episode_id"][i], step=py["step"][i],
            policy_action=policy_action[i] if py["has_policy_action"][i] else None,
            base_action=base_action[i] if py["has_base_action"][i] else None,
            is_intervention=py["is_intervention"][i], segment_source=SOURCES[py["source"][i]],
            segment_id=py["segment_id"][i], policy_version=py["policy_version"][i], obs_stamp=py["obs_stamp"][i],
            next_obs_stamp=py["next_obs_stamp"][i], task=py["task"][i] if has_task else 0))
    return out


def encode_transitions(transitions: Sequence[Transition]) -> bytes:
    """Transitions as safetensors bytes (for a pipe or socket; never pickle)."""
    return bytes(save(transitions_to_columns(transitions), metadata={"format": "robot_rl.transitions"}))


def decode_transitions(data: bytes) -> list[Transition]:
    """Inverse of :func:`encode_transitions`; raises SpecError on malformed content."""
    try:
        cols = load(data)
    except Exception as exc:  # safetensors raises its own error types for corrupt headers
        raise SpecError(f"transitions: not a valid safetensors payload ({exc})") from exc
    return columns_to_transitions(cols)
