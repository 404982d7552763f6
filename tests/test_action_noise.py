"""DART recording: the env executes the expert's action plus noise, the store keeps the clean action."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from test_data_record import ENV_ID, ReachExpert

from robot_rl.cli.main import main
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.action_noise import ActionNoise
from robot_rl.data.recorder import record


class Spy(gym.Wrapper):
    """Remembers every action the inner env executed."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.executed: list[np.ndarray] = []

    def step(self, action: np.ndarray):  # type: ignore[no-untyped-def]
        self.executed.append(np.array(action, copy=True))
        return self.env.step(action)


def _record(env: gym.Env, path: Path, seed: int = 5, episodes: int = 3) -> EpisodeStore:
    store = EpisodeStore.create(path, DatasetInfo(robot="point", fps=20.0))
    record(env, ReachExpert(env), store, episodes=episodes, seed=seed, progress=False)
    return store


def test_store_keeps_the_experts_clean_action_while_the_env_runs_the_noisy_one(tmp_path: Path) -> None:
    spy = Spy(gym.make(ENV_ID))
    store = _record(ActionNoise(spy, sigma=0.3, dims=[0]), tmp_path / "dart.zarr")
    steps = [t for i in range(store.num_episodes) for t in store.transitions(i)]
    stored, executed = np.stack([t.action for t in steps]), np.stack(spy.executed)
    expert = ReachExpert(None)  # type: ignore[arg-type]
    np.testing.assert_allclose(stored, np.stack([expert.act(t.observation) for t in steps]), atol=1e-5)
    moved = executed[:, 0] - stored[:, 0]
    inside = np.abs(executed[:, 0]) < 1.0  # clipping at the bounds shrinks the noise there
    assert 0.2 < np.std(moved[inside]) < 0.4  # dimension 0 perturbed with the chosen sigma
    np.testing.assert_array_equal(executed[:, 1], stored[:, 1])  # dimension 1 (e.g. a gripper) untouched
    assert np.all(np.abs(executed) <= 1.0)
    # the perturbation changes where the point goes: the next observation follows the executed action
    t = steps[0]
    np.testing.assert_allclose(t.next_observation["qpos"], t.observation["qpos"] + 0.05 * 2.0 * executed[0],
                               atol=1e-5)
    assert store.episode_info(0).success is True  # the expert corrects the drift and still reaches


def test_seeded_noise_replays_and_zero_noise_changes_nothing(tmp_path: Path) -> None:
    a = _record(ActionNoise(gym.make(ENV_ID), 0.3), tmp_path / "a.zarr")
    b = _record(ActionNoise(gym.make(ENV_ID), 0.3), tmp_path / "b.zarr")
    clean = _record(gym.make(ENV_ID), tmp_path / "clean.zarr")
    zero = _record(ActionNoise(gym.make(ENV_ID), 0.0), tmp_path / "zero.zarr")
    np.testing.assert_array_equal(a.array("action")[:], b.array("action")[:])
    np.testing.assert_array_equal(zero.array("action")[:], clean.array("action")[:])
    assert a.num_frames != clean.num_frames or not np.allclose(a.array("action")[:], clean.array("action")[:])


def test_bad_settings_are_refused() -> None:
    env = gym.make(ENV_ID)
    with pytest.raises(ValueError, match="sigma"):
        ActionNoise(env, float("nan"))
    with pytest.raises(ValueError, match="sigma"):
        ActionNoise(env, -0.1)
    with pytest.raises(ValueError, match="dims"):
        ActionNoise(env, 0.1, dims=[2])
    with pytest.raises(TypeError, match="Box"):
        ActionNoise(gym.make("CartPole-v1"), 0.1)
    noisy = ActionNoise(env, 0.1)
    with pytest.raises(ValueError, match="expected 2 values"):
        noisy.action(np.zeros(3, np.float32))


def test_cli_records_dart_demonstrations_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.zarr"
    args = ["data", "record", "--env", ENV_ID, "--expert", "test_data_record:ReachExpert", "--episodes", "2",
            "--no-progress"]
    assert main([*args, "--out", str(out), "--action-noise", "0.3", "--noise-dims", "0"]) == 0
    assert "recorded 2 episode(s)" in capsys.readouterr().out
    store = EpisodeStore.open(out)
    assert store.info.source.endswith("dart:0.3")
    expert = ReachExpert(None)  # type: ignore[arg-type]
    steps = list(store.transitions(0))
    clean_actions = np.stack([expert.act(t.observation) for t in steps])
    np.testing.assert_allclose(np.stack([t.action for t in steps]), clean_actions, atol=1e-5)
    # the recorded path is not the clean one: the noise moved the point
    clean = tmp_path / "clean.zarr"
    assert main([*args, "--out", str(clean)]) == 0
    assert not np.allclose(store.array("observation.qpos")[:5], EpisodeStore.open(clean).array("observation.qpos")[:5])
    # bad settings: a clear error, and no store is created
    capsys.readouterr()
    bad = tmp_path / "bad.zarr"
    assert main([*args, "--out", str(bad), "--action-noise", "0.3", "--noise-dims", "7"]) == 2
    assert "dims: [7] out of range for a 2-dimensional action" in capsys.readouterr().out
    assert main([*args, "--out", str(bad), "--action-noise", "-0.1"]) == 2
    assert "sigma: must be finite and >= 0" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*args, "--out", str(bad), "--action-noise", "0.3", "--noise-dims", "0,x"])
    assert "expected comma-separated integers" in capsys.readouterr().err
    assert not bad.exists()
