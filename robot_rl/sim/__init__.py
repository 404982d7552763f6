"""Simulation: MuJoCo scenes composed from robot models that PyPI packages ship, as Gymnasium envs.

Importing this package registers the ``robot_rl/...`` environment ids (lazily: the env modules are
imported by ``gymnasium.make``). ``-RealStandIn-v0`` variants use the hidden perturbation set
``default`` of :mod:`robot_rl.sim.stand_in`.
"""

from __future__ import annotations

import gymnasium as gym

ENVS: dict[str, str] = {
    "ArmReach": "robot_rl.sim.envs.arm_reach:ArmReachEnv",
    "ArmPush": "robot_rl.sim.envs.arm_push:ArmPushEnv",
    "ArmPickLift": "robot_rl.sim.envs.arm_pick_lift:ArmPickLiftEnv",
    "HumanoidStand": "robot_rl.sim.envs.humanoid_stand:HumanoidStandEnv",
    "HumanoidWalk": "robot_rl.sim.envs.humanoid_walk:HumanoidWalkEnv",
    "QuadHover": "robot_rl.sim.envs.quad_hover:QuadHoverEnv",
    "QuadTrack": "robot_rl.sim.envs.quad_track:QuadTrackEnv",
}
"""Task name -> entry point."""

ENV_IDS: list[str] = []


def _register() -> None:
    for task, entry in ENVS.items():
        stand_in = {"stand_in": "default"}
        variants: tuple[tuple[str, dict[str, str]], ...] = (
            (f"robot_rl/{task}-v0", {}), (f"robot_rl/{task}-RealStandIn-v0", stand_in))
        for env_id, kwargs in variants:
            if env_id not in gym.registry:
                gym.register(env_id, entry_point=entry, kwargs=kwargs, disable_env_checker=True)
            ENV_IDS.append(env_id)


_register()
