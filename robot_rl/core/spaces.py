"""Observation and action specs: named fields with shape, dtype and bounds.

Every array that crosses a boundary (simulator → policy, ROS message → core, dataset → learner) is
checked against a spec, so a wrong shape, dtype or a NaN fails where it enters with the field's name in
the message, not three modules later as a broadcasting error.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np


class SpecError(ValueError):
    """A value does not match its spec; the message names the field."""


def check_array(name: str, value: Any, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> np.ndarray:
    """Return ``value`` as an array after checking its shape, dtype and finiteness.

    Args:
        name: Field name used in error messages.
        value: The array (or array-like) to check.
        shape: Required shape, or None to accept any.
        dtype: Required dtype, or None to accept any numeric or bool dtype.

    Raises:
        SpecError: naming ``name`` when the shape or dtype differ or a float contains NaN/inf.
    """
    if not isinstance(value, np.ndarray):
        raise SpecError(f"{name}: expected a numpy array, got {type(value).__name__}")
    if shape is not None and value.shape != tuple(shape):
        raise SpecError(f"{name}: expected shape {tuple(shape)}, got {value.shape}")
    if dtype is not None and value.dtype != dtype:
        raise SpecError(f"{name}: expected dtype {np.dtype(dtype).name}, got {value.dtype.name}")
    if value.dtype.kind not in "biuf":
        raise SpecError(f"{name}: expected a numeric or bool array, got dtype {value.dtype.name}")
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
        raise SpecError(f"{name}: contains {bad} non-finite value(s) (NaN or inf)")
    return value


@dataclass(frozen=True)
class FieldSpec:
    """One named array: its shape, dtype and (for floats) optional bounds."""

    shape: tuple[int, ...]
    """Shape of one sample, without batch or time dimensions."""
    dtype: str = "float32"
    """numpy dtype name; images are ``uint8`` with shape (H, W, C)."""
    low: float | tuple[float, ...] | None = None
    """Lower bound (scalar or per element); None means unbounded."""
    high: float | tuple[float, ...] | None = None
    """Upper bound (scalar or per element); None means unbounded."""
    description: str = ""
    """What the field holds, in words (units, frame)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if any(s <= 0 for s in self.shape):
            raise SpecError(f"shape must have positive sizes, got {self.shape}")
        np.dtype(self.dtype)  # raises TypeError for unknown dtype names
        lo, hi = self.bounds()
        if np.any(lo > hi):
            raise SpecError(f"low > high in bounds {self.low} / {self.high}")

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype object."""
        return np.dtype(self.dtype)

    @property
    def is_image(self) -> bool:
        """True for uint8 (H, W, C) arrays."""
        return self.dtype == "uint8" and len(self.shape) == 3

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-element (low, high) arrays; ±inf where unbounded (0..255 for uint8)."""
        if self.np_dtype.kind == "u" and self.low is None and self.high is None:
            info = np.iinfo(self.np_dtype)
            return np.full(self.shape, info.min), np.full(self.shape, info.max)
        lo = np.broadcast_to(np.asarray(-np.inf if self.low is None else self.low, np.float64), self.shape)
        hi = np.broadcast_to(np.asarray(np.inf if self.high is None else self.high, np.float64), self.shape)
        return lo.copy(), hi.copy()

    def check(self, name: str, value: Any) -> np.ndarray:
        """Check one sample; raise :class:`SpecError` naming ``name`` on any mismatch."""
        return check_array(name, value, self.shape, self.np_dtype)

    def to_space(self) -> gym.spaces.Box:
        """The equivalent Gymnasium Box space."""
        lo, hi = self.bounds()
        return gym.spaces.Box(lo.astype(self.np_dtype), hi.astype(self.np_dtype), self.shape, self.np_dtype)


class _Spec(Mapping[str, FieldSpec]):
    """An ordered, read-only mapping of field names to :class:`FieldSpec`."""

    def __init__(self, fields: Mapping[str, FieldSpec]) -> None:
        for key, value in fields.items():
            if not isinstance(value, FieldSpec):
                raise SpecError(f"{key}: expected a FieldSpec, got {type(value).__name__}")
        self._fields = dict(fields)

    @property
    def fields(self) -> dict[str, FieldSpec]:
        """A copy of the fields, in order."""
        return dict(self._fields)

    def __getitem__(self, key: str) -> FieldSpec:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._fields!r})"

    def check(self, value: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
        """Check a dict of arrays field by field: same keys, shapes, dtypes, all finite."""
        if not isinstance(value, Mapping):
            raise SpecError(f"{prefix or 'value'}: expected a dict of arrays, got {type(value).__name__}")
        missing = [k for k in self._fields if k not in value]
        extra = [k for k in value if k not in self._fields]
        if missing or extra:
            raise SpecError(f"{prefix or 'value'}: missing fields {missing}, unexpected fields {extra}")
        return {k: spec.check(f"{prefix}{k}", value[k]) for k, spec in self._fields.items()}

    def to_space(self) -> gym.spaces.Dict:
        """The equivalent Gymnasium Dict space."""
        return gym.spaces.Dict({k: s.to_space() for k, s in self._fields.items()})


class ObservationSpec(_Spec):
    """The observation a robot or simulator produces: proprioception fields and camera images."""

    @property
    def image_keys(self) -> list[str]:
        """Names of the camera fields."""
        return [k for k, s in self._fields.items() if s.is_image]

    @property
    def state_keys(self) -> list[str]:
        """Names of the non-image fields."""
        return [k for k, s in self._fields.items() if not s.is_image]


class ActionSpec(_Spec):
    """The action a policy emits, split into named parts (e.g. ``delta_pose``, ``gripper``)."""

    @property
    def dim(self) -> int:
        """Length of the flat action vector (all fields concatenated in order)."""
        return sum(math.prod(s.shape) for s in self._fields.values())

    def flat_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the flat action vector."""
        los, his = zip(*(s.bounds() for s in self._fields.values()))
        return np.concatenate([lo.ravel() for lo in los]), np.concatenate([hi.ravel() for hi in his])

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Split a flat action vector into its named parts."""
        parts = self.__dict__.get("_parts")
        if parts is None:  # (key, start, stop, shape, dtype) per field, worked out once: split runs every env step
            parts, i = [], 0
            for key, spec in self._fields.items():
                n = math.prod(spec.shape)
                parts.append((key, i, i + n, spec.shape, spec.np_dtype))
                i += n
            self._parts = parts
        flat = check_array("action", np.asarray(flat), (parts[-1][2] if parts else 0,), None)
        return {key: flat[a:b].reshape(shape).astype(dtype) for key, a, b, shape, dtype in parts}

    def join(self, parts: Mapping[str, Any]) -> np.ndarray:
        """Concatenate named parts into the flat float32 action vector."""
        checked = self.check(parts, prefix="action.")
        return np.concatenate([checked[k].ravel() for k in self._fields]).astype(np.float32)
