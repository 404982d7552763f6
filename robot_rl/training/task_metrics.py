"""Per-episode task metrics beside success: how far a hover sags, how far a tracker lags, how well a walker walks.

Success alone hides what sim-to-real gaps do to these tasks (a hover expert that sags 13 cm never "succeeds"
within 5 cm, and neither does one that sags 6 cm), so evaluations report one number per episode that did not
fail (crash, fall), in SI units. One function per task, keyed by the task's env id without the variant
(``robot_rl/QuadHover-v0`` and ``robot_rl/QuadHover-RealStandIn-v0`` share ``QuadHover``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from robot_rl.control.rotations import heading_planar, quat_to_mat
from robot_rl.runtime.episode import EpisodeResult


def hover_error(out: EpisodeResult) -> float:
    """Mean |z - goal_z| over the last 100 steps (2 s at 50 Hz) [m]: the steady-state sag."""
    z = [t.next_observation["position"][2] - t.next_observation["goal_pos"][2] for t in out.transitions]
    return float(np.abs(z[-100:]).mean())


def track_error(out: EpisodeResult) -> float:
    """Mean |p - goal| after the first 100 steps (the 2 s start-up transient excluded) [m]."""
    d = [np.linalg.norm(t.next_observation["position"] - t.next_observation["goal_pos"]) for t in out.transitions]
    return float(np.mean(d[100:]))


def heading_velocity(obs: Mapping[str, np.ndarray]) -> np.ndarray:
    """Planar velocity (vx, vy) of the pelvis in its heading frame (world velocity rotated by -yaw) [m/s]."""
    rot = quat_to_mat(obs["base_quat"].astype(np.float64))
    return heading_planar(rot, rot @ obs["base_linvel"].astype(np.float64))


def walk_error(out: EpisodeResult) -> float:
    """|mean heading-frame (vx, vy) from 2 s on - commanded (vx, vy)| [m/s] (shorter than 2 s: all of it).

    The mean over the episode's walking part is the velocity smoothed over it, so the gait's within-step
    sway does not count, a steady drift does.
    """
    v = np.array([heading_velocity(t.next_observation) for t in out.transitions])
    command = np.asarray(out.transitions[0].observation["command"][:2], dtype=np.float64)
    return float(np.linalg.norm((v[100:] if len(v) > 100 else v).mean(axis=0) - command))


@dataclass(frozen=True)
class TaskMetric:
    """A task's per-episode metric and how to print it."""

    fn: Callable[[EpisodeResult], float]
    """The metric of one kept episode (its transitions), SI units."""
    label: str
    """What it measures, for tables."""
    unit: str
    """Printed unit; ``factor`` converts the SI value into it."""
    factor: float = 1.0
    tolerance: float | None = None
    """An episode "tracks" when it did not fail and its metric is at most this (SI); None: no such count."""


TASK_METRICS: dict[str, TaskMetric] = {
    "QuadHover": TaskMetric(hover_error, "|z - goal|", "cm", 100.0),
    "QuadTrack": TaskMetric(track_error, "|p - goal|", "cm", 100.0),
    "HumanoidWalk": TaskMetric(walk_error, "|v_xy - command|", "m/s", 1.0, tolerance=0.1),
}
"""Task name (env id without namespace and variant) -> metric."""


def task_name(env_id: str) -> str:
    """``robot_rl/QuadHover-RealStandIn-v0`` -> ``QuadHover``."""
    name = env_id.split("/")[-1]
    return name.split("-")[0]


def metric_for(env_id: str) -> TaskMetric | None:
    """The metric of ``env_id``'s task; None for tasks measured by success only (the arm's)."""
    return TASK_METRICS.get(task_name(env_id))
