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
from robot_rl.core import SpecError
from robot_rl.core.transition import SegmentSource
from robot_rl.data.stream_recorder import StreamRecorder
from robot_rl.robots.descriptions import description
from robot_rl.runtime.actions import ActionAdapter, make_adapter

Observation = Mapping[str, np.ndarray]


class FloatingBaseSteps:
    """Per-robot recording rules for a floating-base robot (see the module docstring).

    From its description: its policies' action space (``policy_mode``) and that mode's adapter (inverse,
    holding action, relabel).
    """

    def __init__(self, robot: str, rate_hz: float) -> None:
        d = description(robot)
        if d.base is None or d.policy_mode is None:
            raise SpecError(f"{robot} is a {d.kind}, not a floating-base robot with a policy action space")
        self.robot, self.kind, self.mode = robot, d.kind, d.policy_mode
        self.adapter: ActionAdapter = make_adapter(self.mode, robot, rate_hz)

    @property
    def relabels(self) -> bool:
        """Whether a human step's action must be relabelled from the motion it caused (quadrotor)."""
        return self.adapter.relabels_human_steps

    def action_of(self, target: JointTarget | BodyRateTarget) -> np.ndarray:
        """A policy's target as the action that produced it (the inverse of the policy node's adapter)."""
        return self.adapter.action_of(target)

    def hold_action(self, obs: Observation) -> np.ndarray:
        """The action before any policy target: hold the measured posture (humanoid), hover thrust (quadrotor)."""
        return self.adapter.hold_action(obs)

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
