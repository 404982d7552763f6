"""Success read from an observation, for steps whose ``is_success`` was never recorded (demonstrations).

Episode stores keep the env's shaped reward and one success flag per episode; a learner that trains on
the sparse per-step success (as on a real robot) needs to know at which demonstration steps the task was
done. For tasks whose success is visible in the observation, these functions apply the env's OWN success
rule (the function behind its ``is_success``) to the observation, so there is no second definition to
drift (tests/test_learner_rlpd.py checks the agreement on recorded episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from robot_rl.core.transition import Transition

ObservedSuccess = Callable[[Mapping[str, np.ndarray]], bool]


def pick_lift_success(obs: Mapping[str, np.ndarray]) -> bool:
    """ArmPickLift's rule (:func:`robot_rl.sim.envs.arm_pick_lift.lift_success`) on the observed cube position."""
    from robot_rl.sim.envs.arm_pick_lift import lift_success  # the simulator only when a task needs it

    return lift_success(np.asarray(obs["object_pos"]))


TASK_SUCCESS: dict[str, ObservedSuccess] = {
    "robot_rl/ArmPickLift-v0": pick_lift_success,
    "robot_rl/ArmPickLift-RealStandIn-v0": pick_lift_success,
}
"""Environment id -> success from an observation."""


def observed_success(env_id: str) -> ObservedSuccess:
    """The observed success of ``env_id``; a clear error for tasks without one."""
    try:
        return TASK_SUCCESS[env_id]
    except KeyError:
        raise ValueError(f"no observed success for {env_id!r} (have {sorted(TASK_SUCCESS)}): demonstrations "
                         "cannot be given sparse per-step rewards; use reward: env") from None


def episode_succeeded(rule: ObservedSuccess, episode: Sequence[Transition]) -> bool:
    """Whether the task succeeded at any step of ``episode``, by ``rule`` on the observations.

    Where the observations do not show the task (a policy on a ROS graph that sees no object), the episode's
    success event decides: a streaming actor closes an episode on the teleop's (or a detector's) success with
    a terminal step of reward 1.
    """
    try:
        return any(rule(t.next_observation) for t in episode)
    except KeyError:
        return bool(episode) and episode[-1].terminated and episode[-1].reward > 0.0
