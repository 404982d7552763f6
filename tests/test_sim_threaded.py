"""ThreadedVectorEnv: every robot's envs stepped with their physics on C threads equal the single envs."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.control import kernels
from robot_rl.core import SpecError
from robot_rl.rl.config import RLConfig
from robot_rl.rl.envs import make_vector
from robot_rl.sim.threaded import ThreadedVectorEnv
from robot_rl.sim.vector import make_vector_env

CASES = [
    ("robot_rl/ArmReach-v0", {}),
    ("robot_rl/HumanoidWalk-v0", {}),
    ("robot_rl/QuadTrack-v0", {}),
    # action delay (two physics stretches per step), motor lag, noise: the stand-in's pipeline
    ("robot_rl/QuadHover-RealStandIn-v0", {}),
    ("robot_rl/HumanoidStand-v0", {"randomization": {"mass_scale": [0.8, 1.2], "action_latency_s": [0.0, 0.01]}}),
]


@pytest.mark.parametrize(("env_id", "options"), CASES, ids=[c[0].split("/")[1] + ("+dr" if c[1] else "")
                                                             for c in CASES])
def test_threaded_equals_sync_vector_env_bit_for_bit(env_id: str, options: dict) -> None:
    """Same seeds and actions: observations, rewards, ends and success identical, across autoresets."""
    n, length = 4, 9
    threaded = ThreadedVectorEnv(env_id, n, nthread=2, max_episode_steps=length, **options)
    sync = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync", max_episode_steps=length, **options)
    obs_t, _ = threaded.reset(seed=7)
    obs_s, _ = sync.reset(seed=7)
    rng = np.random.default_rng(1)
    ends = 0
    for _ in range(2 * length + 3):  # two episode ends, next-step autoreset in between
        for key in obs_s:
            np.testing.assert_array_equal(obs_t[key], obs_s[key], err_msg=key)
        act = (0.4 * rng.uniform(-1, 1, threaded.action_space.shape)).astype(np.float32)
        obs_t, r_t, term_t, trunc_t, info_t = threaded.step(act)
        obs_s, r_s, term_s, trunc_s, info_s = sync.step(act)
        np.testing.assert_array_equal(r_t, r_s)
        np.testing.assert_array_equal(term_t, term_s)
        np.testing.assert_array_equal(trunc_t, trunc_s)
        np.testing.assert_array_equal(info_t["is_success"], info_s["is_success"])
        np.testing.assert_array_equal(info_t["_is_success"], info_s["_is_success"])
        ends += int(np.sum(term_t | trunc_t))
    assert ends >= n  # the time limit was reached and the envs restarted
    flat = np.concatenate([np.asarray(v, np.float64).reshape(n, -1) for v in obs_t.values()], axis=1)
    assert not np.allclose(flat[0], flat[1])  # the copies run different episodes
    threaded.close()
    sync.close()


def test_physics_runs_on_worker_threads_in_parallel() -> None:
    """With 2 threads the envs' physics stretches run on the caller and a pool thread (numba nogil)."""
    if kernels.load() is None:
        pytest.skip(kernels.unavailable_reason())
    venv = ThreadedVectorEnv("robot_rl/HumanoidStand-v0", 4, nthread=2)
    venv.reset(seed=0)
    seen: set[str] = set()
    for env in venv.robot_envs:
        original = env.run_physics

        def spy(n: int, original=original) -> str:
            seen.add(threading.current_thread().name)
            return original(n)

        env.run_physics = spy  # type: ignore[method-assign]
    venv.step(np.zeros(venv.action_space.shape, np.float32))
    assert seen == {threading.current_thread().name, "robot_rl-physics_0"}
    assert kernels.load().pd_substeps.targetoptions.get("nogil") is True
    venv.close()


def test_bad_actions_step_no_env() -> None:
    venv = ThreadedVectorEnv("robot_rl/ArmReach-v0", 3, nthread=2)
    venv.reset(seed=0)
    before = [env.data.qpos.copy() for env in venv.robot_envs]
    act = np.zeros(venv.action_space.shape, np.float32)
    act[2, 0] = np.nan
    with pytest.raises(SpecError, match="NaN or inf"):
        venv.step(act)
    for env, q in zip(venv.robot_envs, before):
        np.testing.assert_array_equal(env.data.qpos, q)
        assert env.elapsed_steps == 0
    obs, *_ = venv.step(np.zeros(venv.action_space.shape, np.float32))  # still usable
    assert np.all(np.isfinite(obs["tcp_pos"]))
    with pytest.raises(ValueError):
        venv.step(np.zeros((2, 7), np.float32))
    venv.close()


def test_threaded_from_the_rl_config_and_make_vector_env() -> None:
    cfg = RLConfig(env_id="robot_rl/QuadTrack-v0", vector="threaded", num_envs=2)
    venv = make_vector(cfg, 3)
    assert isinstance(venv, ThreadedVectorEnv) and venv.num_envs == 3 and venv.max_episode_steps == 400
    venv.close()
    with pytest.raises(ValueError, match="at most one"):
        make_vector_env("robot_rl/QuadTrack-v0", 2, batched=True, threaded=True)
