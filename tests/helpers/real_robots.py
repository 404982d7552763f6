"""Robots that play "the real one" and that only the tests define: never shipped, never tuned on.

The shipped stand-in (``ArmPickLift-RealStandIn-v0``, the Panda description's ``stand_ins["default"]``) is the
robot the workflow was developed against; these are the checks that it was not tuned to it. Each has its
own masses (the cube's with them), friction, damping, actuator strength, command delay and motor lag, given
to the nominal env as ``env_options={"randomization": ...}`` with collapsed ranges (fixed values).
``R2`` lies inside the band of config/learners/online_pick_lift_randomized.yaml, ``R3`` outside it.
"""

from __future__ import annotations

import json
from typing import Any

NOMINAL_ENV = "robot_rl/ArmPickLift-v0"


def _fixed(mass: float, friction: float, damping: float, gain: float, delay_s: float, lag_s: float) -> dict[str, Any]:
    return {"mass_scale": [mass, mass], "friction_scale": [friction, friction], "damping_scale": [damping, damping],
            "actuator_gain_scale": [gain, gain], "action_latency_s": [delay_s, delay_s],
            "motor_time_constant_s": [lag_s, lag_s], "action_noise_std": 0.002, "observation_noise_std": 0.001}


REAL_ROBOTS: dict[str, dict[str, Any]] = {
    "R2": _fixed(mass=0.9, friction=0.75, damping=1.4, gain=1.06, delay_s=0.02, lag_s=0.008),
    "R3": _fixed(mass=1.25, friction=1.1, damping=3.0, gain=0.82, delay_s=0.05, lag_s=0.01),
}
"""Name -> its perturbation set (robot_rl.sim.config.Randomization fields)."""


def env_options(name: str) -> dict[str, Any]:
    """The ``env_options`` that make the nominal env this robot."""
    return {"randomization": REAL_ROBOTS[name]}


if __name__ == "__main__":  # python tests/helpers/real_robots.py R2: the JSON for --real-options
    import sys

    print(json.dumps(env_options(sys.argv[1])))
