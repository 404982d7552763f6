"""Which velocity command a robot follows: the human's during an intervention, else its normal source.

A walking policy observes a ``command`` (vx, vy, yaw rate); on a graph it comes from ``cmd_vel`` (a
navigation stack, a joystick relay) and, while the human holds the intervention, from ``teleop/cmd_vel``.
:class:`VelocityCommandMux` is that choice, with the fail-safe of twist_mux and ros2_control's
``cmd_vel_timeout``: a source that has gone silent for ``timeout_s`` commands zero (stand still / hover),
never its last value. With no command ever received the ``default`` holds (a constant task input, or
zero). Pure core, shared by the policy node and the recorder so both see the same command.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from robot_rl.core.spaces import SpecError

COMMAND_TIMEOUT_S = 0.5
"""Default silence after which a velocity source counts as gone [s]."""


@dataclass
class VelocityCommandMux:
    """Latest twist per source ("robot": cmd_vel, "human": teleop/cmd_vel) and the intervention flag."""

    default: np.ndarray = field(default_factory=lambda: np.zeros(6))
    """(vx, vy, vz, wx, wy, wz) followed before any command arrived."""
    timeout_s: float = COMMAND_TIMEOUT_S
    """A source silent for longer commands zero."""
    human: bool = False
    """The human holds the intervention: only ``teleop/cmd_vel`` counts."""
    _latest: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.default = np.asarray(self.default, dtype=np.float64).reshape(-1)
        if self.default.shape != (6,) or not np.all(np.isfinite(self.default)):
            raise SpecError(f"VelocityCommandMux.default: expected 6 finite values, got {self.default}")
        if not self.timeout_s > 0:
            raise SpecError(f"VelocityCommandMux.timeout_s must be positive, got {self.timeout_s}")

    def update(self, source: str, linear: np.ndarray, angular: np.ndarray, now: float) -> None:
        """A twist from ``source`` ("robot" or "human") received at ``now`` [s].

        Raises:
            SpecError: for an unknown source or non-finite values (the previous command stays in force).
        """
        twist = np.r_[np.asarray(linear, np.float64), np.asarray(angular, np.float64)]
        if source not in ("robot", "human"):
            raise SpecError(f"VelocityCommandMux: unknown source {source!r}")
        if twist.shape != (6,) or not np.all(np.isfinite(twist)):
            raise SpecError(f"{source} velocity command: expected finite linear and angular vectors, got {twist}")
        self._latest[source] = (twist, now)

    def twist(self, now: float) -> np.ndarray:
        """The twist in force at ``now``: (vx, vy, vz, wx, wy, wz)."""
        source = "human" if self.human else "robot"
        latest = self._latest.get(source)
        if latest is None:
            # nothing from the human yet (they just took over) stops; nothing from the robot's source ever: default
            return np.zeros(6) if self.human else self.default.copy()
        twist, stamp = latest
        return twist.copy() if now - stamp <= self.timeout_s else np.zeros(6)

    def base_command(self, now: float) -> np.ndarray:
        """The walking command (vx, vy, yaw rate) in force at ``now``."""
        t = self.twist(now)
        return np.array([t[0], t[1], t[5]])


def command_default(value: np.ndarray | None) -> np.ndarray:
    """A constant walking ``command`` (vx, vy, yaw rate) as a mux default twist; None -> zero."""
    if value is None:
        return np.zeros(6)
    c = np.asarray(value, dtype=np.float64).reshape(-1)
    if c.shape != (3,):
        raise SpecError(f"command: expected 3 values (vx, vy, yaw rate), got {c}")
    return np.array([c[0], c[1], 0.0, 0.0, 0.0, c[2]])
