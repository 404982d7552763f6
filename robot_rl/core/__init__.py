"""Core data types shared by every part of robot_rl: specs, embodiments, transitions, configs."""

from robot_rl.core.embodiment import ControlMode, Embodiment, JointLimits, Rates
from robot_rl.core.spaces import ActionSpec, FieldSpec, ObservationSpec, SpecError
from robot_rl.core.transition import SegmentSource, Transition

__all__ = [
    "ActionSpec",
    "ControlMode",
    "Embodiment",
    "FieldSpec",
    "JointLimits",
    "ObservationSpec",
    "Rates",
    "SegmentSource",
    "SpecError",
    "Transition",
]
