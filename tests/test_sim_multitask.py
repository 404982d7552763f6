"""ArmMultiTask: one scene, tasks named by instructions; the expert, the scene per seed, success per task, recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401  (registers the ids)
from robot_rl.cli.main import main
from robot_rl.core import SpecError
from robot_rl.core.config import ConfigError
from robot_rl.data import EpisodeStore
from robot_rl.data.env_info import dataset_info
from robot_rl.data.recorder import record
from robot_rl.sim.envs.arm_multitask import TASK_NAMES, TASKS, layout_ok, task_named
from robot_rl.sim.envs.arm_pick_lift import LIFT_HEIGHT
from robot_rl.sim.experts import MultiTaskExpert, expert_for

ENV_ID = "robot_rl/ArmMultiTask-v0"
SCENE_KEYS = ("red_cube_pos", "red_cube_quat", "blue_cube_pos", "blue_cube_quat", "goal_pos", "joint_pos")
"""What the seed alone decides, whatever the task."""
COLOUR_MARGIN = 60
"""A pixel is red-ish (blue-ish) when that channel exceeds the others by this much (0..255)."""


def _run_expert(env: gym.Env, seed: int, task: str, expert: Any | None = None) -> tuple[bool, int]:
    expert = expert or expert_for(env)
    obs, _ = env.reset(seed=seed, options={"task": task})
    expert.reset()
    for step in range(1, 10**6):
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        if info["is_success"] or terminated or truncated:
            return bool(info["is_success"]), step
    raise AssertionError("unreachable")


@pytest.mark.parametrize("task", TASK_NAMES)
def test_every_task_is_solved_by_the_expert(task: str) -> None:
    env = gym.make(ENV_ID)
    results = [_run_expert(env, seed, task) for seed in range(3)]
    assert all(ok for ok, _ in results), f"{task}: {results}"
    assert isinstance(expert_for(env), MultiTaskExpert)


@pytest.mark.slow
def test_expert_success_rate_per_task() -> None:
    """The acceptance rate of the demonstrations: >= 95% on each task over 20 seeds (state only)."""
    env = gym.make(ENV_ID)
    expert = expert_for(env)
    for task in TASK_NAMES:
        wins = sum(_run_expert(env, seed, task, expert)[0] for seed in range(100, 120))
        assert wins >= 19, f"{task}: {wins}/20"


def test_same_seed_same_scene_whatever_the_task() -> None:
    """The instruction swap test's premise: forcing another task (or restricting the set) moves nothing."""
    env = gym.make(ENV_ID)
    restricted = gym.make(ENV_ID, tasks=["lift_blue"])
    for seed in (0, 7):
        scenes = []
        for task in TASK_NAMES:
            obs, _ = env.reset(seed=seed, options={"task": task})
            scenes.append((obs, env.unwrapped.data.qpos.copy()))
        obs, _ = restricted.reset(seed=seed)
        scenes.append((obs, restricted.unwrapped.data.qpos.copy()))
        obs, _ = env.reset(seed=seed)  # drawn, not forced
        scenes.append((obs, env.unwrapped.data.qpos.copy()))
        first, qpos = scenes[0]
        for other, other_qpos in scenes[1:]:
            np.testing.assert_array_equal(other_qpos, qpos)
            for key in SCENE_KEYS:
                np.testing.assert_array_equal(other[key], first[key], err_msg=key)
        red, blue, goal = first["red_cube_pos"], first["blue_cube_pos"], first["goal_pos"]
        assert layout_ok(red[:2].astype(float), blue[:2].astype(float), goal[:2].astype(float))
        assert goal[2] > 0.09  # the green ball floats (reach's goal); push uses its x, y


def test_instruction_matches_the_task_and_the_target() -> None:
    env = gym.make(ENV_ID)
    noisy = gym.make(ENV_ID, randomization={"observation_noise_std": 0.01})
    for index, task in enumerate(TASKS):
        obs, info = env.reset(seed=3, options={"task": task.name})
        assert info["task"] == task.name
        assert info["instruction"] == env.unwrapped.instruction == task.instruction
        assert obs["task_id"][0] == index
        target = obs[f"{task.cube}_cube_pos"] if task.cube else obs["goal_pos"]
        np.testing.assert_array_equal(obs["object_pos"], target)  # one key names the target for every task
        obs, _ = noisy.reset(seed=3, options={"task": task.name})
        assert obs["task_id"][0] == index  # exact: an index never gets observation noise
    assert len({t.instruction for t in TASKS}) == len(TASKS)
    red, blue = task_named("lift_red").instruction, task_named("lift_blue").instruction
    assert red.replace("red", "blue") == blue  # the pair that only the colour word tells apart
    pick = gym.make("robot_rl/ArmPickLift-v0")
    assert set(pick.observation_space.spaces) <= set(env.observation_space.spaces)


def test_drawn_tasks_and_bad_names() -> None:
    env = gym.make(ENV_ID)
    drawn = {env.reset(seed=s)[1]["task"] for s in range(30)}
    assert drawn == set(TASK_NAMES)
    pair = gym.make(ENV_ID, tasks="lift_red,lift_blue")  # the form --override tasks=... gives
    assert {pair.reset(seed=s)[1]["task"] for s in range(20)} == {"lift_red", "lift_blue"}
    assert pair.reset(seed=0, options={"task": "reach"})[1]["task"] == "reach"  # forcing may leave the set
    with pytest.raises(ConfigError, match="tasks"):
        gym.make(ENV_ID, tasks=["lift_green"])
    with pytest.raises(SpecError, match="lift_green"):
        env.reset(seed=0, options={"task": "lift_green"})
    assert env.unwrapped.appearance.object_geoms.size == 2  # object colour jitter shifts both cubes alike


def test_success_is_per_task() -> None:
    """Lifting the blue cube in a lift_red episode is no success; the same motion succeeds in lift_blue."""
    env = gym.make(ENV_ID)
    blue_id = TASK_NAMES.index("lift_blue")
    expert = expert_for(env)
    obs, _ = env.reset(seed=1, options={"task": "lift_red"})
    expert.reset()
    lifted = False
    for _ in range(40):  # the lift_blue expert, told the blue cube is the target
        seen = {**obs, "task_id": np.array([blue_id], np.float32), "object_pos": obs["blue_cube_pos"],
                "object_quat": obs["blue_cube_quat"]}
        obs, _, _, _, info = env.step(expert.act(seen))
        assert not info["is_success"] and info["reward_terms"]["lift"] == 0.0
        lifted = lifted or obs["blue_cube_pos"][2] > 0.025 + LIFT_HEIGHT
    assert lifted
    assert _run_expert(env, 1, "lift_blue")[0]


def test_cameras_show_a_red_and_a_blue_cube() -> None:
    env = gym.make(ENV_ID, cameras=("front",), image_size=(32, 32))
    obs, _ = env.reset(seed=0)
    r, g, b = np.moveaxis(obs["image_front"].astype(int), -1, 0)
    reddish = (r > g + COLOUR_MARGIN) & (r > b + COLOUR_MARGIN)
    bluish = (b > r + COLOUR_MARGIN) & (b > g + COLOUR_MARGIN // 2)
    assert reddish.sum() >= 1 and bluish.sum() >= 1


def test_record_stores_each_episodes_instruction(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    expected = [env.reset(seed=s)[1]["instruction"] for s in range(6)]
    assert len(set(expected)) > 1
    store = EpisodeStore.create(tmp_path / "multi.zarr", dataset_info(env, ENV_ID))
    with store:
        record(env, expert_for(env), store, episodes=6, max_steps=2, seed=0, progress=False)
        assert [store.episode_info(i).task for i in range(6)] == expected
        record(env, expert_for(env), store, episodes=1, max_steps=2, seed=0, task="explicit", progress=False)
        assert store.episode_info(6).task == "explicit"  # an explicit task still wins


def test_cli_records_with_cameras_and_instructions(tmp_path: Path) -> None:
    out = tmp_path / "multi.zarr"
    assert main(["data", "record", "--out", str(out), "--env", ENV_ID, "--cameras", "front,wrist",
                 "--image-size", "64", "64", "--episodes", "2", "--max-steps", "2", "--no-progress"]) == 0
    env = gym.make(ENV_ID)
    store = EpisodeStore.open(out)
    assert [store.episode_info(i).task for i in range(2)] == [env.reset(seed=s)[1]["instruction"] for s in range(2)]
    assert store.schema is not None and set(store.schema.image_keys) == {"image_front", "image_wrist"}
    assert store.schema.observation["image_front"].shape == (64, 64, 3)
