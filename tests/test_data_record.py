"""Recording from a gymnasium env with a scripted expert, and the ``robot-rl data`` command line end to end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from robot_rl.cli.main import main
from robot_rl.core.spaces import SpecError
from robot_rl.data import DatasetInfo, EpisodeStore
from robot_rl.data.recorder import record

ENV_ID = "robot_rl_test/DataReach-v0"


class ReachEnv(gym.Env):
    """A point that must reach a target; a 16x16 camera shows both. NaN observations on request."""

    metadata: ClassVar[dict[str, Any]] = {"render_fps": 20, "render_modes": []}

    def __init__(self, nan_at: tuple[int, int] | None = None) -> None:
        self.observation_space = gym.spaces.Dict({
            "qpos": gym.spaces.Box(-2, 2, (2,), np.float64),
            "target": gym.spaces.Box(-2, 2, (2,), np.float64),
            "cam": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
        })
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.dt = 0.05
        self.nan_at = nan_at
        self.episode = -1

    def _obs(self) -> dict[str, np.ndarray]:
        cam = np.zeros((16, 16, 3), np.uint8)
        for p, ch in ((self.pos, 0), (self.target, 1)):
            r, c = np.clip(((p + 2) / 4 * 15).round().astype(int), 0, 15)
            cam[r, c, ch] = 255
        obs = {"qpos": self.pos.copy(), "target": self.target.copy(), "cam": cam}
        if self.nan_at == (self.episode, self.t):
            obs["qpos"][1] = np.nan
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2)
        self.target = self.np_random.uniform(-1, 1, 2)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        self.pos = np.clip(self.pos + self.dt * 2.0 * np.clip(action, -1, 1), -2, 2)
        self.t += 1
        dist = float(np.linalg.norm(self.pos - self.target))
        done = dist < 0.05
        return self._obs(), -dist, done, False, {"is_success": done}


class ReachExpert:
    """Proportional controller toward the target."""

    def __init__(self, env: gym.Env) -> None:
        self.gain = 4.0

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        return np.clip(self.gain * (obs["target"] - obs["qpos"]), -1, 1).astype(np.float32)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=ReachEnv, max_episode_steps=60)


def test_record_scripted_expert(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    store = EpisodeStore.create(tmp_path / "r.zarr", DatasetInfo(robot="point", fps=20.0, task="reach"))
    report = record(env, ReachExpert(env), store, episodes=5, seed=3, progress=False)
    assert report.success_rate == 1.0 and len(report.episodes) == 5
    assert all(5 <= n < 60 for n in report.lengths)
    for i in range(5):
        steps = list(store.transitions(i))
        assert steps[-1].terminated and not any(s.terminated for s in steps[:-1])
        assert store.episode_info(i).success is True
        final = np.linalg.norm(steps[-1].next_observation["qpos"] - steps[-1].next_observation["target"])
        assert final < 0.05
        assert steps[0].observation["qpos"].dtype == np.float32  # float64 sim state stored compactly
        assert steps[0].segment_source.value == "scripted"
        np.testing.assert_allclose(steps[3].obs_stamp, 3 / 20)


def test_record_max_steps_truncates(tmp_path: Path) -> None:
    env = gym.make(ENV_ID)
    store = EpisodeStore.create(tmp_path / "r.zarr", DatasetInfo(robot="point", fps=20.0))
    slow = lambda obs: 0.01 * (obs["target"] - obs["qpos"])  # noqa: E731 - a plain callable expert
    report = record(env, slow, store, episodes=2, max_steps=7, progress=False)
    assert report.lengths == [7, 7] and report.success_rate == 0.0
    assert list(store.transitions(1))[-1].truncated


def test_nan_from_sim_discards_only_that_episode(tmp_path: Path) -> None:
    env = gym.make(ENV_ID, nan_at=(2, 4))
    store = EpisodeStore.create(tmp_path / "r.zarr", DatasetInfo(robot="point", fps=20.0))
    with pytest.raises(SpecError, match=r"episode 2, step 3, field next_observation\.qpos: contains 1 non-finite"):
        record(env, ReachExpert(env), store, episodes=4, progress=False)
    assert store.num_episodes == 2
    assert store.array("action").shape[0] == store.num_frames  # the partial take left nothing behind


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and p.name != ".writer.lock":
            h.update(str(p.relative_to(path)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.slow
def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "cli.zarr"
    common = ["--no-progress"]
    assert main(["data", "record", "--out", str(store), "--env", ENV_ID, "--expert", "test_data_record:ReachExpert",
                 "--episodes", "3", "--task", "reach the dot", *common]) == 0
    assert "recorded 3 episode(s)" in capsys.readouterr().out
    assert main(["data", "record", "--out", str(store), "--env", ENV_ID, "--expert", "test_data_record:ReachExpert",
                 "--episodes", "1", "--seed", "9", *common]) == 0  # appends
    capsys.readouterr()
    assert main(["data", "info", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["episodes"] == 4 and info["successes"] == 4 and info["info"]["fps"] == 20.0
    assert info["fields"]["cam"] == "uint8[16, 16, 3]" and info["info"]["cameras"] == {"cam": {"height": 16,
                                                                                            "width": 16}}
    assert main(["data", "validate", str(store), *common]) == 0
    assert "OK: 4 episode(s)" in capsys.readouterr().out
    assert main(["data", "stats", str(store), "--out", str(tmp_path / "s.json"), *common]) == 0
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["observation.qpos"]["min"][0] >= -2 and len(stats["observation.qpos"]["q50"]) == 2
    assert main(["data", "plot", str(store), "--out", str(tmp_path / "plots"), "--episodes", "0,3", *common]) == 0
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == ["episode_0000.png", "episode_0000_frames.png", "episode_0003.png", "episode_0003_frames.png"]
    assert all((tmp_path / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert main(["data", "export", str(store), "--out", str(tmp_path / "lr"), *common]) == 0
    assert main(["data", "import", "lerobot", str(tmp_path / "lr"), "--out", str(tmp_path / "back.zarr"),
                 *common]) == 0
    back = EpisodeStore.open(tmp_path / "back.zarr")
    assert back.num_frames == info["frames"] and back.tasks == ["reach the dot"]
    capsys.readouterr()
    # validate reports a corrupt chunk by episode and field, and changes nothing on disk
    (store / "data" / "observation.cam" / f"{info['frames'] - 1}.0.0.0").write_bytes(b"\x00" * 40)
    before = _digest(store)
    assert main(["data", "validate", str(store), *common]) == 1
    out = capsys.readouterr().out
    assert f"ISSUE   {store}: episode 3, field observation.cam: cannot be read" in out
    assert _digest(store) == before
    assert main(["data", "info", str(tmp_path / "missing.zarr")]) == 1
    assert "no episode store" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_records_the_default_arm_pick_lift_env(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("robot_rl.sim.experts", reason="the simulator's scripted experts are not in this tree")
    store = tmp_path / "pick.zarr"
    assert main(["data", "record", "--out", str(store), "--episodes", "2", "--cameras", "wrist",
                 "--image-size", "32", "32", "--max-steps", "40", "--no-progress"]) == 0
    assert "recorded 2 episode(s)" in capsys.readouterr().out
    data = EpisodeStore.open(store)
    assert data.info.robot == "panda" and data.info.fps == 10.0
    assert data.info.controller["control_mode"] and data.info.cameras == {"image_wrist": {"height": 32,
                                                                                          "width": 32}}
    assert data.num_frames == 80 and data.schema is not None and "image_wrist" in data.schema.image_keys
    lifted = [float(t.observation["object_pos"][2]) for t in data.transitions(0)]
    assert max(lifted) > lifted[0] + 0.05  # the scripted expert really picked the cube up


class SlowReachExpert(ReachExpert):
    """The reach expert at a human-like pace (5 ms per step)."""

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        import time

        time.sleep(0.005)
        return super().act(obs)


@pytest.mark.slow
def test_ctrl_c_keeps_committed_episodes_and_drops_the_partial_one(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    store = tmp_path / "int.zarr"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "robot_rl.cli.main", "data", "record", "--out", str(store),
                             "--env", ENV_ID, "--import", "test_data_record", "--expert",
                             "test_data_record:SlowReachExpert", "--episodes", "1000", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until some episodes are committed
        time.sleep(0.5)
        if (store / "meta" / "episode_ends" / "0").is_file():
            break
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    data = EpisodeStore.open(store)
    assert data.num_episodes >= 1 and data.uncommitted_frames == 0
    assert f"{data.num_episodes} episode(s) in" in out
    assert all(data.episode_info(i).success for i in range(data.num_episodes))


def test_steps_after_success_keeps_the_task_and_a_short_settle(tmp_path: Path) -> None:
    """The take ends N steps after the first success: a prefix of the full take, success kept, cut not ended."""
    import robot_rl.sim  # noqa: F401
    from robot_rl.sim.experts import expert_for

    env = gym.make("robot_rl/ArmPickLift-v0")
    full = EpisodeStore.create(tmp_path / "full.zarr", DatasetInfo(robot="panda", fps=10.0))
    record(env, expert_for(env), full, episodes=1, seed=11, progress=False)
    short = EpisodeStore.create(tmp_path / "short.zarr", DatasetInfo(robot="panda", fps=10.0))
    report = record(env, expert_for(env), short, episodes=1, seed=11, progress=False, steps_after_success=5)
    whole, cut = list(full.transitions(0)), list(short.transitions(0))
    lifted = [t.next_observation["object_pos"][2] - whole[0].observation["object_pos"][2] > 0.1 for t in whole]
    first = lifted.index(True)  # ArmPickLift's success: the cube 10 cm up
    assert len(cut) == first + 6 == report.lengths[0] < len(whole) == env.spec.max_episode_steps
    assert short.episode_info(0).success is True and cut[-1].truncated and not cut[-1].terminated
    np.testing.assert_allclose(np.stack([t.action for t in cut]), np.stack([t.action for t in whole[:len(cut)]]))
    with pytest.raises(ValueError, match="steps_after_success"):
        record(env, expert_for(env), short, episodes=1, steps_after_success=-1, progress=False)
