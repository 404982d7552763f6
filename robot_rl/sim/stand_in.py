"""Real-world stand-ins: named, fixed perturbation sets the policy never observes.

Each set makes the simulator behave like "the real robot" would in the sim-to-real work: other
masses, friction and damping, weaker or stronger actuators, command delay, motor lag and noise.
They are plain :class:`Randomization` values with collapsed ranges, so an episode under a stand-in
is as deterministic as a nominal one for a fixed seed.
"""

from __future__ import annotations

from robot_rl.sim.config import Randomization

STAND_INS: dict[str, dict[str, Randomization]] = {
    "panda": {
        "default": Randomization(
            mass_scale=(1.15, 1.15), friction_scale=(0.8, 0.8), damping_scale=(2.0, 2.0),
            actuator_gain_scale=(0.92, 0.92), action_latency_s=(0.03, 0.03), latency_s=(0.002, 0.002),
            motor_time_constant_s=(0.005, 0.005),
            action_noise_std=0.002, observation_noise_std=0.001),
    },
    "g1": {
        "default": Randomization(
            mass_scale=(1.08, 1.08), friction_scale=(0.85, 0.85), damping_scale=(1.5, 1.5),
            actuator_gain_scale=(0.93, 0.93), action_latency_s=(0.01, 0.01), motor_time_constant_s=(0.004, 0.004),
            action_noise_std=0.002, observation_noise_std=0.002),
    },
    "cf2x": {
        "default": Randomization(
            mass_scale=(1.1, 1.1), damping_scale=(1.0, 1.0), actuator_gain_scale=(0.95, 0.95),
            latency_s=(0.004, 0.004), motor_time_constant_s=(0.03, 0.03),
            action_noise_std=0.01, observation_noise_std=0.002),
    },
}
"""Robot name -> stand-in name -> perturbation set."""


def stand_in(robot: str, name: str) -> Randomization:
    """The named stand-in of ``robot``; a KeyError lists the available names."""
    sets = STAND_INS.get(robot, {})
    if name not in sets:
        raise KeyError(f"no stand-in {name!r} for robot {robot!r}; available: {sorted(sets)}")
    return sets[name]
