"""What a recorded step holds for a humanoid or a quadrotor, so the learners' human-intervention paths can use it.

The arm's recorder stores the absolute tool target in force (the human's during an intervention); a
floating-base robot's human does not command the policy's action space, so the rules differ:

* humanoid (``joint_position``): the human steers the walking policy's ``command`` (vx, vy, yaw rate), the
  policy keeps acting. A step stores that command as the observation ``command`` and, as the action, the
  policy's joint targets in its own action space (:func:`~robot_rl.runtime.actions.joint_position_map`);
  intervention steps are flagged but their action is the policy's, not a human label (a learner that
  imitates intervention actions, as HG-DAgger does, learns nothing new from them; one that conditions on
  the command, or credits segments, does).
* quadrotor (``thrust_body_rates``): the human flies position setpoints that the flight controller tracks,
  so the executed action is no message anyone sent. Like the policy node's online actor
  (:mod:`robot_rl.runtime.step_stream`), a human step's action is relabelled from the measured motion into
  the policy's action space (:meth:`~robot_rl.runtime.actions.ThrustBodyRates.relabel`), which needs the
  next sample: :class:`RelabellingRecorder` holds one sample back. The human's setpoint is stored as the
  task input ``goal_pos`` (and a velocity setpoint as ``goal_vel``), what QuadHover / QuadTrack policies observe.

Pure core: numpy, the robot modules and the data layer only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robot_rl.control.targets import BodyRateTarget, JointTarget
from robot_rl.core import ControlMode, SpecError
from robot_rl.core.transition import SegmentSource
from robot_rl.data.stream_recorder import StreamRecorder
from robot_rl.robots import cf2x, robot_module
from robot_rl.runtime.actions import MAX_BODY_RATE, ActionAdapter, joint_position_map, make_adapter

Observation = Mapping[str, np.ndarray]


class FloatingBaseSteps:
    """Per-robot recording rules for a humanoid or a quadrotor (see the module docstring)."""

    def __init__(self, robot: str, rate_hz: float) -> None:
        self.robot = robot
        self.kind = robot_module(robot).EMBODIMENT.kind
        if self.kind == "humanoid":
            self.mode = ControlMode.JOINT_POSITION
        elif self.kind == "quadrotor":
            self.mode = ControlMode.THRUST_BODY_RATES
        else:
            raise SpecError(f"{robot} is a {self.kind}, not a floating-base robot")
        self.adapter: ActionAdapter = make_adapter(self.mode, robot, rate_hz)
        self.joint_map = joint_position_map(robot)

    @property
    def relabels(self) -> bool:
        """Whether a human step's action must be relabelled from the motion it caused (quadrotor)."""
        return self.kind == "quadrotor"

    def action_of(self, target: JointTarget | BodyRateTarget) -> np.ndarray:
        """A policy's target as the action that produced it (the inverse of the policy node's adapter)."""
        if isinstance(target, JointTarget) and self.kind == "humanoid":
            return self.joint_map.to_action(target.q).astype(np.float32)
        if isinstance(target, BodyRateTarget) and self.kind == "quadrotor":
            collective = np.clip(target.thrust / (4 * cf2x.THRUST_MAX), 0.0, 1.0)
            return np.r_[collective, np.clip(target.rates / MAX_BODY_RATE, -1.0, 1.0)].astype(np.float32)
        raise SpecError(f"{type(target).__name__} is not an action target of the {self.kind}")

    def hold_action(self, obs: Observation) -> np.ndarray:
        """The action before any policy target: hold the measured posture (humanoid), hover thrust (quadrotor)."""
        if self.kind == "humanoid":
            return self.joint_map.to_action(obs["joint_pos"]).astype(np.float32)
        return cf2x.rest_action(self.mode).astype(np.float32)

    def relabel(self, before: Observation, after: Observation) -> np.ndarray:
        """The action that moved the robot from ``before`` to ``after``, in the policy's action space."""
        return self.adapter.relabel(before, after, 1.0)


class RelabellingRecorder:
    """A :class:`StreamRecorder` front that relabels human steps from the next sample (None: pass-through).

    Same calls as the recorder it wraps (``add``, ``end``, ``close``, ``steps``, ``recording``), so a node
    swaps one for the other; the last human sample of an episode is relabelled against itself (no motion).
    """

    def __init__(self, recorder: StreamRecorder, steps: FloatingBaseSteps | None) -> None:
        self.recorder = recorder
        self.steps_rule = steps if steps is not None and steps.relabels else None
        self._held: tuple[dict[str, np.ndarray], np.ndarray, SegmentSource, float] | None = None

    @property
    def recording(self) -> bool:
        """Whether an episode is open (or a sample waits for its successor)."""
        return self.recorder.recording or self._held is not None

    @property
    def steps(self) -> int:
        """Transitions written to the open episode."""
        return self.recorder.steps

    def add(self, obs: Observation, action: np.ndarray, source: SegmentSource | str, stamp: float) -> None:
        """One sample; a human sample's ``action`` is replaced by its relabel once the next one arrives."""
        if self.steps_rule is None:
            self.recorder.add(obs, action, source, stamp)
            return
        self._release(obs)
        self._held = ({k: np.asarray(v) for k, v in obs.items()}, np.asarray(action, np.float32),
                      SegmentSource(source), stamp)

    def _release(self, after: Observation | None) -> None:
        if self._held is None or self.steps_rule is None:
            return
        obs, action, source, stamp = self._held
        self._held = None
        if source is SegmentSource.HUMAN:
            action = self.steps_rule.relabel(obs, obs if after is None else after)
        self.recorder.add(obs, action, source, stamp)

    def end(self, event: str) -> int | None:
        """End the open episode (see :meth:`StreamRecorder.end`); a held sample is written first."""
        if event == "rerecord":
            self._held = None
        self._release(None)
        return self.recorder.end(event)

    def close(self) -> None:
        """Commit an open episode as truncated."""
        if self.recording:
            self.end("stop")
