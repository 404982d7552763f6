"""Message ↔ numpy conversions. The only place that knows both ROS message layouts and core arrays."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import JointState

from robot_rl.core.spaces import SpecError


def seconds_to_stamp(t: float) -> Time:
    """A builtin_interfaces/Time from seconds (nanosecond resolution)."""
    ns = round(t * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_to_seconds(stamp: Time) -> float:
    """Seconds from a builtin_interfaces/Time."""
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_to_ns(stamp: Time) -> int:
    """Integer nanoseconds from a builtin_interfaces/Time (exact)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def joint_state_to_msg(names: Sequence[str], position: np.ndarray, velocity: np.ndarray | None = None,
                       effort: np.ndarray | None = None, stamp_ns: int = 0, frame_id: str = "") -> JointState:
    """Build a sensor_msgs/JointState; arrays are float64 and must match ``names`` in length."""
    msg = JointState()
    msg.header.stamp = Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
    msg.header.frame_id = frame_id
    msg.name = list(names)
    n = len(names)
    for field, values in (("position", position), ("velocity", velocity), ("effort", effort)):
        if values is None:
            continue
        arr = np.asarray(values, dtype=np.float64).ravel()
        if arr.shape != (n,):
            raise SpecError(f"JointState.{field}: expected {n} values, got {arr.shape[0]}")
        setattr(msg, field, arr.tolist())
    return msg


def joint_state_from_msg(msg: JointState, joint_names: Sequence[str] | None = None
                         ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Arrays (names, position, velocity, effort) from a JointState, reordered to ``joint_names``.

    Empty velocity/effort fields come back as NaN arrays so a caller cannot mistake them for zeros.

    Raises:
        SpecError: for unknown or missing joint names, length mismatches or non-finite positions.
    """
    names = list(msg.name)
    n = len(names)
    arrays = []
    for field in ("position", "velocity", "effort"):
        values = np.asarray(getattr(msg, field), dtype=np.float64)
        if values.size == 0 and field != "position":
            values = np.full(n, np.nan)
        if values.shape != (n,):
            raise SpecError(f"JointState.{field}: {values.size} values for {n} names")
        arrays.append(values)
    if not np.all(np.isfinite(arrays[0])):
        raise SpecError("JointState.position: contains NaN or inf")
    if joint_names is not None:
        lookup = {name: i for i, name in enumerate(names)}
        missing = [j for j in joint_names if j not in lookup]
        if missing:
            raise SpecError(f"JointState: missing joints {missing} (got {names})")
        order = np.array([lookup[j] for j in joint_names], dtype=np.intp)
        arrays = [a[order] for a in arrays]
        names = list(joint_names)
    return names, arrays[0], arrays[1], arrays[2]
