"""The robots that only the tests define (tests/helpers/real_robots.py) are other robots than the shipped
stand-in, are the robots the env builds from them, and can do the task (the scripted expert succeeds there).

The workflow's success on them is measured by benchmarks/arm_real_workflow.py --real-robot R2|R3
(benchmarks/README.md, The arm on the "real" robot); these checks keep those runs honest.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers.real_robots import NOMINAL_ENV, REAL_ROBOTS, env_options

import robot_rl.sim  # noqa: F401
from robot_rl.robots.scenes import OBJECT_BODY
from robot_rl.sim.experts import expert_for
from robot_rl.sim.stand_in import stand_in
from robot_rl.training.evaluate import evaluate


@pytest.mark.parametrize("name", sorted(REAL_ROBOTS))
def test_each_test_robot_differs_from_the_shipped_stand_in_where_the_issue_asks(name: str) -> None:
    shipped, mine = stand_in("panda", "default"), REAL_ROBOTS[name]
    for field in ("mass_scale", "friction_scale", "action_latency_s"):  # the cube's mass, friction, command delay
        assert tuple(mine[field]) != tuple(getattr(shipped, field)), field


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL_ROBOTS))
def test_the_env_is_that_robot_and_the_scripted_expert_does_the_task_there(name: str) -> None:
    nominal, env = gym.make(NOMINAL_ENV), gym.make(NOMINAL_ENV, **env_options(name))
    try:
        nominal.reset(seed=0)
        env.reset(seed=0)
        n, m = nominal.unwrapped.model, env.unwrapped.model
        cube = n.body(OBJECT_BODY).id
        assert m.body_mass[cube] == pytest.approx(n.body_mass[cube] * REAL_ROBOTS[name]["mass_scale"][0])
        assert np.allclose(m.geom_friction[:, 0], n.geom_friction[:, 0] * REAL_ROBOTS[name]["friction_scale"][0])
        delay = REAL_ROBOTS[name]["action_latency_s"][0]
        assert env.unwrapped.action_delay_steps == round(delay * env.unwrapped.config.physics_hz)
        report = evaluate(expert_for(env), env, NOMINAL_ENV, 10, seed=900_000)
        assert sum(report.successes) >= 8, report.successes
    finally:
        nominal.close()
        env.close()
