"""Privileged labels derived from stored observation fields, for auxiliary heads (training only).

An auxiliary head (``policy.aux_keys``) makes a camera policy's image features carry what its actions
depend on. Some of that is stored as is (``object_pos``); some is a function of several fields, such as
the cube's yaw relative to the gripper, which decides how far the hand must turn before it grasps: a
pick-and-lift policy that finds the cube but not its yaw closes its fingers on the cube's corners.
Computing those labels from the stored fields keeps datasets as they were recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def quat_yaw(q: np.ndarray) -> np.ndarray:
    """Heading [rad] of the body x axis in the world xy plane for quaternions (..., 4) wxyz, any scale.

    The batched form of :func:`robot_rl.control.rotations.quat_yaw` (the scripted arm experts' yaw).
    """
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.arctan2(2.0 * (x * y + w * z), 1.0 - 2.0 * (y * y + z * z))


def cube_yaw_in_hand(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """(cos 4d, sin 4d) of d = cube yaw - hand yaw: continuous although a cube looks the same every 90 deg."""
    delta = quat_yaw(columns["object_quat"]) - quat_yaw(columns["tcp_quat"])
    return np.stack([np.cos(4.0 * delta), np.sin(4.0 * delta)], axis=-1).astype(np.float32)


@dataclass(frozen=True)
class DerivedLabel:
    """A label computed from stored observation fields."""

    sources: tuple[str, ...]
    """Observation fields it is computed from."""
    compute: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    """(frames of each source) -> (frames, dim) float32."""


DERIVED_LABELS: dict[str, DerivedLabel] = {
    "object_yaw_in_hand": DerivedLabel(("object_quat", "tcp_quat"), cube_yaw_in_hand),
}
"""Label name -> how to compute it; ``aux_keys`` may name these as well as stored fields."""


def label_columns(aux_keys: Sequence[str], read: Callable[[str], np.ndarray | None], n: int) -> dict[str, np.ndarray]:
    """The labels of ``aux_keys`` over ``n`` frames: stored fields as they are, or derived from stored ones.

    ``read(field)`` returns a field's frames, or None where it was not recorded; labels that can be neither
    read nor derived are left out (the caller decides whether that is an error).
    """
    out = {}
    for key in aux_keys:
        value = read(key)
        label = DERIVED_LABELS.get(key)
        if value is None and label is not None:
            sources = {src: read(src) for src in label.sources}
            if all(v is not None for v in sources.values()):
                value = label.compute(sources)  # type: ignore[arg-type]
        if value is not None:
            out[key] = np.asarray(value, dtype=np.float32).reshape(n, -1)
    return out
