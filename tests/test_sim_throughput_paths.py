"""The envs' compiled physics loops give the physics of the Python callback loop (issue 16, P2).

Twin envs with the same seed and actions, one stepping with its compiled loop (``compiled_physics``, the
default) and one with ``mj_step1 -> pipeline(_control()) -> mj_step2`` in Python, must agree on state,
ctrl, observations and rewards: bit for bit where the law is the same arithmetic (joint PD, Cartesian
law, pipeline), to 1e-9 for the quadrotor (its mixer product is summed in another order). The stand-ins
cover the actuator delay, lag and noise; divergences are reported with the same reasons.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.control import kernels

pytestmark = pytest.mark.skipif(kernels.load() is None,
                                reason=f"compiled kernels unavailable: {kernels.unavailable_reason()}")

CASES = [
    ("robot_rl/ArmPickLift-v0", {}),
    ("robot_rl/ArmPickLift-v0", {"controller": "cartesian_impedance"}),
    ("robot_rl/ArmPickLift-RealStandIn-v0", {}),
    ("robot_rl/HumanoidStand-v0", {}),
    ("robot_rl/HumanoidStand-RealStandIn-v0", {}),
    ("robot_rl/QuadHover-v0", {}),
    ("robot_rl/QuadHover-v0", {"control_mode": "motor_commands"}),
    ("robot_rl/QuadHover-RealStandIn-v0", {}),
]


def _twins(env_id: str, kwargs: dict) -> tuple[gym.Env, gym.Env]:
    fast, ref = gym.make(env_id, **kwargs), gym.make(env_id, **kwargs)
    ref.unwrapped.compiled_physics = False
    assert fast.unwrapped.compiled_physics
    return fast, ref


@pytest.mark.parametrize(("env_id", "kwargs"), CASES, ids=lambda c: str(c))
def test_compiled_and_python_physics_agree(env_id: str, kwargs: dict) -> None:
    fast, ref = _twins(env_id, kwargs)
    exact = not env_id.startswith("robot_rl/Quad")
    rng = np.random.default_rng(0)
    for episode in range(2):
        fast.reset(seed=episode)
        ref.reset(seed=episode)
        assert fast.unwrapped._compiled_substeps() is not None, "this env has a compiled loop"
        hover = fast.unwrapped.last_action if hasattr(fast.unwrapped, "last_action") else None
        for _ in range(12):
            action = fast.action_space.sample() * 0.3 if hover is None else hover + rng.normal(0.0, 0.05, 4)
            out_f, out_r = fast.step(action), ref.step(action)
            a, b = fast.unwrapped.data, ref.unwrapped.data
            state_f, state_r = np.r_[a.qpos, a.qvel, a.ctrl, a.time], np.r_[b.qpos, b.qvel, b.ctrl, b.time]
            if exact:
                np.testing.assert_array_equal(state_f, state_r)
            else:
                np.testing.assert_allclose(state_f, state_r, rtol=1e-9, atol=1e-9)
            for key in out_f[0]:
                np.testing.assert_allclose(out_f[0][key], out_r[0][key], rtol=1e-6, atol=1e-6)
            assert out_f[1] == pytest.approx(out_r[1], abs=1e-6)
            assert out_f[2:4] == out_r[2:4]
            if out_f[2] or out_f[3]:
                break
    fast.close()
    ref.close()


def test_divergences_are_reported_alike() -> None:
    """A non-finite command and a MuJoCo divergence warning end the episode with the same reason either way."""
    reasons = []
    for compiled in (True, False):
        env = gym.make("robot_rl/ArmReach-v0")
        env.unwrapped.compiled_physics = compiled
        env.reset(seed=0)
        pipe = env.unwrapped.pipeline  # a lag whose state is NaN sends NaN commands on
        pipe.reset(np.full(pipe.n, np.nan), 0.0, 0.01, 0.0, np.random.default_rng(0))
        info = env.step(np.zeros(env.action_space.shape, np.float32))[4]
        quad = gym.make("robot_rl/QuadHover-v0")
        quad.unwrapped.compiled_physics = compiled
        quad.reset(seed=0)
        quad.unwrapped.data.qvel[:] = 1e12  # MuJoCo flags the velocity and resets the state
        quad_info = quad.step(quad.action_space.sample())[4]
        reasons.append((info["truncation_reason"], quad_info["truncation_reason"]))
    assert reasons[0] == reasons[1]
    assert reasons[0][0] == "controller produced a non-finite command"
    assert reasons[0][1].startswith("physics diverged (MuJoCo warning: mjWARN_BADQVEL")
