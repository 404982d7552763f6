"""Real-world stand-ins: named, fixed perturbation sets the policy never observes.

Each set makes the simulator behave like "the real robot" would in the sim-to-real work: other
masses, friction and damping, weaker or stronger actuators, command delay, motor lag and noise.
They are plain :class:`Randomization` values with collapsed ranges, so an episode under a stand-in
is as deterministic as a nominal one for a fixed seed.
"""

from __future__ import annotations

from robot_rl.robots.descriptions import DESCRIPTIONS
from robot_rl.sim.config import Randomization


def stand_ins(robot: str) -> dict[str, Randomization]:
    """The stand-ins of ``robot`` by name (``RobotDescription.stand_ins``; none for an unknown robot)."""
    d = DESCRIPTIONS.get(robot)
    return {} if d is None else {name: Randomization(**fields) for name, fields in d.stand_ins.items()}


STAND_INS: dict[str, dict[str, Randomization]] = {name: stand_ins(name) for name in DESCRIPTIONS}
"""Robot name -> stand-in name -> perturbation set, of the robots described when this module was imported."""


def stand_in(robot: str, name: str) -> Randomization:
    """The named stand-in of ``robot``; a KeyError lists the available names."""
    sets = stand_ins(robot)
    if name not in sets:
        raise KeyError(f"no stand-in {name!r} for robot {robot!r}; available: {sorted(sets)}")
    return sets[name]
