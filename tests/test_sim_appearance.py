"""Visual domain randomisation: named options, off by default, per-episode looks that a seed reproduces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import ConfigError
from robot_rl.sim.config import Randomization

LOOK = {"object_rgb_jitter": 0.4, "scene_rgb_jitter": 0.2, "light_scale": [0.5, 1.5], "camera_pos_jitter_m": 0.02,
        "camera_angle_jitter_deg": 3.0}


def _first_frame(randomization: dict | None, seed: int) -> tuple[np.ndarray, dict]:
    options = {"cameras": ["front"], "image_size": [32, 32]}
    if randomization is not None:
        options["randomization"] = randomization
    env = gym.make("robot_rl/ArmPickLift-v0", **options)
    obs, info = env.reset(seed=seed)
    env.close()
    return obs["image_front"], info["dynamics"]


def test_looks_change_per_episode_and_a_seed_reproduces_them() -> None:
    plain_a, dyn = _first_frame(None, 3)
    assert not {"object_rgb_shift", "light_scale"} & set(dyn)  # off by default: nothing sampled
    plain_b, _ = _first_frame({}, 3)
    np.testing.assert_array_equal(plain_a, plain_b)
    looks = [_first_frame(LOOK, seed) for seed in (3, 4, 5)]
    again, _ = _first_frame(LOOK, 3)
    np.testing.assert_array_equal(looks[0][0], again)  # the same seed, the same look
    for image, sampled in looks:
        assert 0.5 <= sampled["light_scale"] <= 1.5 and 0 < sampled["object_rgb_shift"] <= 0.4
        assert np.abs(image.astype(int) - plain_a).mean() > 2.0  # visibly different from the nominal scene
    assert np.abs(looks[0][0].astype(int) - looks[1][0]).mean() > 2.0  # and from one episode to the next


def test_the_model_returns_to_nominal_when_the_options_are_off() -> None:
    env = gym.make("robot_rl/ArmPickLift-v0", randomization=LOOK).unwrapped
    m = env.model
    env.reset(seed=0)
    assert not np.allclose(m.cam_pos, env.appearance.cam_pos)
    env.dynamics = Randomization()
    env.reset(seed=0)
    np.testing.assert_array_equal(m.cam_pos, env.appearance.cam_pos)
    np.testing.assert_array_equal(m.geom_rgba, env.appearance.geom_rgba)
    np.testing.assert_array_equal(m.light_diffuse, env.appearance.light_diffuse)


@pytest.mark.parametrize("bad", [{"object_rgb_jitter": 1.5}, {"light_scale": [1.2, 0.8]},
                                 {"camera_angle_jitter_deg": -1.0}, {"camera_pos_jitter_m": float("nan")}])
def test_bad_look_options_are_refused(bad: dict) -> None:
    with pytest.raises(ConfigError, match="randomization"):
        Randomization(**bad)
