"""Simulation: MuJoCo scenes composed from robot models that PyPI packages ship, as Gymnasium envs.

Importing this package registers the ``robot_rl/...`` environment ids (lazily: the env modules are
imported by ``gymnasium.make``). ``-RealStandIn-v0`` variants use the hidden perturbation set
``default`` of :mod:`robot_rl.sim.stand_in`.
"""

from __future__ import annotations

import gymnasium as gym

ENVS: dict[str, tuple[str, int]] = {
    "ArmReach": ("robot_rl.sim.envs.arm_reach:ArmReachEnv", 40),
    "ArmPush": ("robot_rl.sim.envs.arm_push:ArmPushEnv", 100),
    "ArmPickLift": ("robot_rl.sim.envs.arm_pick_lift:ArmPickLiftEnv", 80),
    "ArmMultiTask": ("robot_rl.sim.envs.arm_multitask:ArmMultiTaskEnv", 100),
    "HumanoidStand": ("robot_rl.sim.envs.humanoid_stand:HumanoidStandEnv", 150),
    "HumanoidWalk": ("robot_rl.sim.envs.humanoid_walk:HumanoidWalkEnv", 500),
    "QuadHover": ("robot_rl.sim.envs.quad_hover:QuadHoverEnv", 250),
    "QuadTrack": ("robot_rl.sim.envs.quad_track:QuadTrackEnv", 400),
}
"""Task name -> (entry point, episode length in policy steps). The length is registered with Gymnasium
(``gym.make`` adds its ``TimeLimit``; ``gym.make(id, max_episode_steps=N)`` changes it; ``env.spec``
reports it); an env built from its class directly has no time limit unless its config sets one."""

ENV_IDS: list[str] = []


def _register() -> None:
    for task, (entry, steps) in ENVS.items():
        stand_in = {"stand_in": "default"}
        variants: tuple[tuple[str, dict[str, str]], ...] = (
            (f"robot_rl/{task}-v0", {}), (f"robot_rl/{task}-RealStandIn-v0", stand_in))
        for env_id, kwargs in variants:
            if env_id not in gym.registry:
                gym.register(env_id, entry_point=entry, kwargs=kwargs, max_episode_steps=steps,
                             disable_env_checker=True)
            ENV_IDS.append(env_id)


_register()
