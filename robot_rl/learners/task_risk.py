"""State-based risk: what a person watching the robot sees coming before it fails.

A supervisor does not compare the policy's action with a reference at every step (that would make the
human take over whenever the policy moves differently but fine); they step in when the *state* is about
to go wrong. For pick-and-lift that is the grasp: the hand low over the cube but off-centre or
mis-rotated, fingers closing around nothing, the cube slipping out of a closing hand, or the hand going
back up with the fingers still open after it was down at the cube (a grasp abandoned). Returned as a
risk in [0, 1] that :class:`~robot_rl.learners.simulated_human.SimulatedHuman` smooths and thresholds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from robot_rl.control.rotations import quat_yaw
from robot_rl.robots import scenes
from robot_rl.sim.experts.arm import PickLiftExpert, wrap_angle

StateRisk = Callable[[Mapping[str, np.ndarray]], float]
"""Risk in [0, 1] of an observation; one with a ``reset()`` method keeps memory within an episode."""

XY_TOLERANCE = 0.015
"""Horizontal tcp-cube offset a grasp survives [m] (the fingers open to 8 cm around a 5 cm cube)."""
YAW_TOLERANCE = 0.35
"""Hand-to-face yaw error a grasp survives [rad]: the 5 cm cube turned by 0.35 rad is 6.3 cm across,
inside the 8 cm opening, and closing fingers turn it square (symmetric every 90 degrees)."""
LOW_ABOVE = 0.025
"""The hand counts as 'going in for the grasp' this close above the cube's centre [m]."""


def pick_lift_grasp_risk(obs: Mapping[str, np.ndarray]) -> float:
    """1 when the hand is committing to a grasp that will fail (or has failed), else 0.

    Measured against the policy's own outcomes (a fine-tuned policy on 15 unseen seeds): the rule flags
    the episodes that fail and rarely one that would have succeeded; a stricter rule (yaw 0.2 rad, any
    closing 0.75 cm off-centre) made the human take over in most episodes the policy would have won.
    """
    width, off_xy, height, cube_z = _hand_over_cube(obs)
    dyaw = abs(wrap_angle(quat_yaw(obs["object_quat"]) - quat_yaw(obs["tcp_quat"]), np.pi / 2))
    lifted = cube_z > scenes.CUBE_HALF + 0.01
    if _holding(width, off_xy, height):
        return 0.0
    if width < PickLiftExpert.GRASP_MIN:  # closed on nothing (or dropped the cube)
        return 1.0
    if lifted:  # the cube is in the air but not in the hand: it is falling or being pushed over
        return 1.0
    low = height < LOW_ABOVE
    misaligned = off_xy > XY_TOLERANCE or dyaw > YAW_TOLERANCE
    return 1.0 if low and misaligned else 0.0


def _hand_over_cube(obs: Mapping[str, np.ndarray]) -> tuple[float, float, float, float]:
    """Finger opening, horizontal hand-cube offset, hand height over the cube's centre, cube height [m]."""
    tcp, obj = np.asarray(obs["tcp_pos"], np.float64), np.asarray(obs["object_pos"], np.float64)
    return (float(obs["gripper_width"][0]), float(np.linalg.norm(obj[:2] - tcp[:2])), float(tcp[2] - obj[2]),
            float(obj[2]))


def _holding(width: float, off_xy: float, height: float) -> bool:
    """Fingers closed on the cube: an opening the cube's size, the hand over it, at its height."""
    return PickLiftExpert.GRASP_MIN <= width <= PickLiftExpert.GRASP_MAX and off_xy < 0.03 and height < 0.03


ABANDON_ABOVE = 0.04
"""Height over the cube's centre [m] at which a hand that was down at the cube with open fingers and has
come back up, still open, counts as having abandoned the grasp."""


class PickLiftGraspRisk:
    """:func:`pick_lift_grasp_risk` plus the one failure it cannot see in a single state: the abandoned grasp.

    The failures that remained on the pick-and-lift stand-in after fine-tuning (8 of 150 episodes of a 95%
    policy, traced step by step) were all the same: the hand comes down over the cube, well aligned, does not
    close, goes back up with the fingers open and hovers or pumps until the time runs out. No single state of
    that is wrong for long (low and off-centre for a step or two now and then), so the smoothed state risk
    never reached a takeover and the human never corrected it. A person sees it at once: the hand was at the
    cube and came back without it. On the same 100 episodes this rule flags all 6 failures (by step 20) and
    17 of the 94 successes (a hand that went up, came down again and then closed: a dithering grasp).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """New episode: the hand has not been at the cube yet."""
        self.was_at_cube = False

    def __call__(self, obs: Mapping[str, np.ndarray]) -> float:
        """1 for an abandoned grasp or any risk of :func:`pick_lift_grasp_risk`, else 0."""
        width, off_xy, height, _ = _hand_over_cube(obs)
        opened = width > PickLiftExpert.GRASP_MAX
        if opened and height < LOW_ABOVE and off_xy <= XY_TOLERANCE:
            self.was_at_cube = True
        if self.was_at_cube and opened and height > ABANDON_ABOVE:
            return 1.0
        return pick_lift_grasp_risk(obs)


SECURED_LIFT = 0.02
"""How far off the table the held cube must be for the correction to count as complete [m]."""


def pick_lift_secured(obs: Mapping[str, np.ndarray]) -> bool:
    """The cube is held and off the table (2 cm up): from here the policy only has to lift it."""
    width, off_xy, height, cube_z = _hand_over_cube(obs)
    return _holding(width, off_xy, height) and cube_z > scenes.CUBE_HALF + SECURED_LIFT


TASK_RISKS: dict[str, Callable[[], StateRisk]] = {"robot_rl/ArmPickLift-v0": PickLiftGraspRisk,
                                                  "robot_rl/ArmPickLift-RealStandIn-v0": PickLiftGraspRisk}
"""Environment id -> a factory of its state risk (used by the actors' ``human_risk: grasp`` setting)."""


TASK_SECURED: dict[str, Callable[[Mapping[str, np.ndarray]], bool]] = {
    "robot_rl/ArmPickLift-v0": pick_lift_secured, "robot_rl/ArmPickLift-RealStandIn-v0": pick_lift_secured}
"""Environment id -> its sub-goal predicate (the simulated human's ``finish_correction``)."""


def task_secured(env_id: str) -> Callable[[Mapping[str, np.ndarray]], bool] | None:
    """The sub-goal predicate of ``env_id``, None for a task without one."""
    return TASK_SECURED.get(env_id)


def task_risk(env_id: str) -> StateRisk:
    """A new state risk of ``env_id``, one per human (it may remember the episode).

    Raises:
        ValueError: for a task without one.
    """
    try:
        return TASK_RISKS[env_id]()
    except KeyError:
        raise ValueError(f"no state-based risk for {env_id!r} (have {sorted(TASK_RISKS)}); "
                         "use human_risk: action") from None
