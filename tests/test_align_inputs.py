"""Sim-to-real alignment plumbing: recorded states round-trip, replays reproduce their own recordings, bad input
gets clear errors naming the episode or file, and artefacts are checked before use."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.align import artifacts
from robot_rl.align.config import AlignConfig, CollectSettings
from robot_rl.align.episodes import AlignmentError, collect, load_episodes, segments
from robot_rl.align.layout import LAYOUTS
from robot_rl.align.models import CorrectionMLP, FitDiverged, fit_regression
from robot_rl.align.replay import Replayer
from robot_rl.core import SpecError
from robot_rl.core.config import ConfigError
from robot_rl.core.transition import Transition
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.sim.base_env import StateOverride


def _cfg(**collect: object) -> AlignConfig:
    settings = {"env_id": "robot_rl/QuadHover-v0", "episodes": 3, "steps": 100, "excitation": 0.05, **collect}
    return AlignConfig(holdout_episodes=1, collect=CollectSettings(**settings))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def nominal_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three excited hover episodes recorded in the nominal simulator itself."""
    return collect(_cfg(), tmp_path_factory.mktemp("align") / "nominal.zarr", progress=False)


def test_reset_at_and_jump_to_a_recorded_state() -> None:
    env = gym.make("robot_rl/HumanoidStand-v0").unwrapped
    layout = LAYOUTS["g1"]
    env.reset(seed=0)
    qpos, qvel = env.data.qpos.copy(), env.data.qvel.copy()
    qpos[7:] += 0.05
    qvel[6:] = 0.3
    env.reset(seed=1, options={"state": StateOverride(layout.qpos_index, qpos, layout.qvel_index, qvel)})
    np.testing.assert_allclose(env.data.qpos, qpos)
    np.testing.assert_allclose(env.data.qvel, qvel)
    env.set_state(StateOverride(layout.qpos_index[:3], np.array([0.1, 0.2, 0.9]), layout.qvel_index[:0], np.zeros(0)))
    np.testing.assert_allclose(env.data.qpos[:3], [0.1, 0.2, 0.9])
    with pytest.raises(SpecError, match="NaN"):
        env.set_state(StateOverride(layout.qpos_index[:1], np.array([np.nan]), layout.qvel_index[:0], np.zeros(0)))
    with pytest.raises(SpecError, match="indices"):
        env.reset(options={"state": StateOverride(np.array([99]), np.zeros(1), np.zeros(0, int), np.zeros(0))})


@pytest.mark.parametrize("env_id", ["robot_rl/QuadTrack-RealStandIn-v0", "robot_rl/HumanoidWalk-v0",
                                    "robot_rl/ArmPickLift-RealStandIn-v0"])
def test_snapshot_restore_repeats_a_step(env_id: str) -> None:
    """Finite differences of the delta-action fit step twice from one snapshot: both steps must agree
    (the arm's to 1e-4: see the note in benchmarks/README.md), and an action changes the outcome."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=3)
    a = env.action_space.sample() * 0.3 + 0.5 * (env.action_space.low + env.action_space.high)
    a = np.clip(a, env.action_space.low, env.action_space.high)
    env.step(a)
    snap = env.snapshot()
    first = env.step(a)[0]
    env.restore(snap)
    again = env.step(a)[0]
    tol = 1e-4 if "Arm" in env_id else 0.0
    for key in first:
        np.testing.assert_allclose(again[key], first[key], atol=tol, err_msg=key)
    env.restore(snap)
    other = env.step(np.clip(a + 0.2 * (env.action_space.high - env.action_space.low), env.action_space.low,
                             env.action_space.high))[0]
    assert max(float(np.abs(other[k] - first[k]).max()) for k in first if k != "last_action") > 1e-4


def test_replay_reproduces_its_own_recording_after_warm_up(nominal_store: Path) -> None:
    """Recorded in the nominal sim, replayed in the nominal sim: the gap must vanish once the warm-up has rebuilt
    the motors' lag state; without it, windows starting mid-flight diverge (the lag state is hidden)."""
    cfg = _cfg()
    replayer = Replayer(cfg, 8)
    try:
        episodes = load_episodes(nominal_store, cfg, 4, 50.0)
        assert [len(e.actions) for e in episodes] == [100, 100, 100]
        warm = segments(episodes, 25, warmup=25)
        cold = segments(episodes, 25, warmup=0)
        gap_warm = replayer.gap(warm, replayer.replay(warm))
        gap_cold = replayer.gap(cold, replayer.replay(cold))
    finally:
        replayer.close()
    assert gap_warm.at("position", 0.5) < 1e-3
    assert gap_warm.at("attitude", 0.5) < 1e-2
    mid_flight = [i for i, s in enumerate(cold.source) if not s.endswith("@0")]
    assert np.mean(gap_cold.errors["position"][mid_flight, -1]) > 10 * gap_warm.at("position", 0.5)


def _write_store(path: Path, robot: str = "cf2x", fps: float = 50.0, nan_action_at: int | None = None,
                 nan_state_at: int | None = None, keys: tuple[str, ...] = ("qpos", "qvel")) -> Path:
    store = EpisodeStore.create(path, DatasetInfo(robot=robot, fps=fps))
    rng = np.random.default_rng(0)
    for ep in range(2):
        steps = []
        for t in range(60):
            obs = {k: rng.normal(size=7 if k == "qpos" else 6).astype(np.float32) for k in keys}
            nxt = {k: rng.normal(size=7 if k == "qpos" else 6).astype(np.float32) for k in keys}
            if steps:
                obs = steps[-1].next_observation
            if ep == 1 and nan_state_at == t:
                nxt = {k: np.full_like(v, np.nan) for k, v in nxt.items()}
            action = np.full(4, 0.5, np.float32)
            if ep == 1 and nan_action_at == t:
                action[:] = np.nan
            steps.append(Transition(observation=obs, next_observation=nxt, action=action, reward=0.0,
                                    terminated=False, truncated=t == 59, episode_id=ep, step=t))
        store.add_episode(steps)
    store.close()
    return path


def test_bad_recordings_are_refused_naming_the_episode(tmp_path: Path) -> None:
    cfg = _cfg()
    with pytest.raises(AlignmentError, match="robot 'panda'"):
        load_episodes(_write_store(tmp_path / "a.zarr", robot="panda"), cfg, 4, 50.0)
    with pytest.raises(AlignmentError, match="100 Hz"):
        load_episodes(_write_store(tmp_path / "b.zarr", fps=100.0), cfg, 4, 50.0)
    with pytest.raises(AlignmentError, match=r"no \['observation.qvel'\]"):
        load_episodes(_write_store(tmp_path / "c.zarr", keys=("qpos",)), cfg, 4, 50.0)
    try:
        path = _write_store(tmp_path / "d.zarr", nan_action_at=17)
    except SpecError:  # the store itself refuses NaN actions: then nothing can reach the alignment
        path = None
    if path is not None:
        with pytest.raises(AlignmentError, match=r"episode d.zarr#1: applied actions missing .* \[17\]"):
            load_episodes(path, cfg, 4, 50.0)
    try:
        path = _write_store(tmp_path / "e.zarr", nan_state_at=30)
    except SpecError:
        path = None
    if path is not None:
        with pytest.raises(AlignmentError, match=r"episode e.zarr#1: non-finite measured state at steps \[31\]"):
            load_episodes(path, cfg, 4, 50.0)
    with pytest.raises(AlignmentError, match="takes 5"):
        load_episodes(_write_store(tmp_path / "f.zarr"), cfg, 5, 50.0)
    with pytest.raises(ConfigError, match="holdout_episodes"):
        AlignConfig(holdout_episodes=30)


def _delta_model(folder: Path, offset: np.ndarray, robot: str = "cf2x", fps: float = 50.0) -> Path:
    lay = LAYOUTS[robot]
    model = CorrectionMLP(lay.feature_dim + 2 * len(offset), len(offset), (8,), squash="tanh")
    with torch.no_grad():
        for p in model.mlp.parameters():
            p.zero_()
    model.set_buffers(out_offset=offset)
    return artifacts.save_artifact(folder, "delta_action", {"robot": robot, "fps": fps}, model)


def test_delta_action_env_runs_the_corrected_action(tmp_path: Path) -> None:
    """An env with ``delta_action`` must move exactly as the nominal env driven by a + delta."""
    offset = np.array([0.05, 0.1, -0.1, 0.0])
    folder = _delta_model(tmp_path / "da", offset)
    aligned = gym.make("robot_rl/QuadHover-v0", delta_action=str(folder)).unwrapped
    plain = gym.make("robot_rl/QuadHover-v0").unwrapped
    aligned.reset(seed=5)
    plain.reset(seed=5)
    a = np.array([0.55, 0.0, 0.0, 0.0], np.float32)
    for _ in range(10):
        o1 = aligned.step(a)[0]
        o2 = plain.step(a + offset)[0]
    np.testing.assert_allclose(o1["position"], o2["position"], atol=1e-6)
    np.testing.assert_allclose(o1["last_action"], a + offset, atol=1e-6)


def test_artefacts_are_checked_before_loading(tmp_path: Path) -> None:
    env = gym.make("robot_rl/QuadHover-v0").unwrapped
    folder = _delta_model(tmp_path / "ok", np.zeros(4))
    assert artifacts.load_delta_action(folder, env) is not None
    with pytest.raises(AlignmentError, match="robot 'g1'"):
        artifacts.load_delta_action(_delta_model(tmp_path / "g1", np.zeros(29), robot="g1"), env)
    with pytest.raises(AlignmentError, match="100 Hz"):
        artifacts.load_delta_action(_delta_model(tmp_path / "hz", np.zeros(4), fps=100.0), env)
    (folder / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(AlignmentError, match="not a readable safetensors"):
        artifacts.load_delta_action(folder, env)
    wrong = _delta_model(tmp_path / "shape", np.zeros(4))
    info = json.loads((wrong / "alignment.json").read_text())
    info["network"]["hidden"] = [16]
    (wrong / "alignment.json").write_text(json.dumps(info))
    with pytest.raises(AlignmentError, match="has shape"):
        artifacts.load_delta_action(wrong, env)
    with pytest.raises(AlignmentError, match="holds a 'delta_action' alignment, expected 'sysid'"):
        artifacts.read_artifact(wrong, "sysid")
    with pytest.raises(AlignmentError, match="no alignment artefact"):
        artifacts.read_artifact(tmp_path / "nothing", "sysid")
    with pytest.raises(AlignmentError, match="robot 'g1'"):
        gym.make("robot_rl/QuadHover-v0", delta_action=str(tmp_path / "g1"))


def test_a_diverging_regression_stops_and_says_so() -> None:
    from robot_rl.align.config import ModelSettings

    model = CorrectionMLP(3, 1, (8,))
    x = np.random.default_rng(0).normal(size=(200, 3))
    with pytest.raises(FitDiverged, match="NaN"):
        fit_regression(model, x, np.full((200, 1), np.nan), ModelSettings(epochs=2), seed=0)
    with pytest.raises(FitDiverged, match="diverged and was stopped"):
        fit_regression(model, x, x[:, :1], ModelSettings(epochs=5, learning_rate=1e3), seed=0)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(FitDiverged, match=r"loss became (inf|nan)"):
        fit_regression(model, x, x[:, :1], ModelSettings(epochs=5, learning_rate=1e20), seed=0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # left as it was


def _pose_target_store(path: Path, speed: float) -> tuple[Path, np.ndarray]:
    """An arm log as recorder_node writes it: absolute tool targets (control_mode cartesian_pose), the measured
    tool pose and qpos/qvel; the targets come from known delta actions through the arm envs' integrator."""
    from robot_rl.runtime.arm_actions import CartesianDeltaIntegrator

    rng = np.random.default_rng(1)
    integrator = CartesianDeltaIntegrator(10.0)
    quat = np.array([0.0, 1.0, 0.0, 0.0])
    tcp = np.array([0.45, 0.0, 0.35]) + 0.02 * np.cumsum(rng.normal(size=(41, 3)), axis=0) * 0.2
    deltas = np.clip(rng.normal(scale=0.4, size=(40, 6)), -0.9, 0.9)
    steps, applied = [], []
    for t in range(40):
        integrator.observe(tcp[t], quat)
        pos, q = integrator.step(deltas[t])
        pos = tcp[t] + speed * (pos - tcp[t])  # speed > 1: targets further than one step reaches
        gripper = float(t < 20)
        applied.append(np.r_[deltas[t], 2 * gripper - 1])

        def obs(k: int) -> dict[str, np.ndarray]:
            return {"tcp_pos": tcp[k].astype(np.float32), "tcp_quat": quat.astype(np.float32),
                    "qpos": np.zeros(9, np.float32), "qvel": np.zeros(9, np.float32)}

        steps.append(Transition(observation=obs(t), next_observation=obs(t + 1),
                                action=np.r_[pos, q, gripper].astype(np.float32), reward=0.0, terminated=False,
                                truncated=t == 39, episode_id=0, step=t))
    info = DatasetInfo(robot="panda", fps=10.0, controller={"control_mode": "cartesian_pose"})
    store = EpisodeStore.create(path, info)
    store.add_episode(steps)
    store.close()
    return path, np.asarray(applied)


def test_recorded_tool_targets_become_the_simulators_delta_actions(tmp_path: Path) -> None:
    """recorder_node logs absolute tool targets; the arm's simulator takes deltas: loading inverts the env's
    integrator (position from the measured tool, rotation from the previous target) and refuses targets that
    move further than the action range allows in one step."""
    cfg = AlignConfig(robot="panda", env_id="robot_rl/ArmReach-v0", holdout_episodes=1,
                      collect=CollectSettings(env_id="robot_rl/ArmReach-v0", episodes=3, steps=40))
    path, applied = _pose_target_store(tmp_path / "arm.zarr", speed=1.0)
    (episode,) = load_episodes(path, cfg, 7, 10.0)
    np.testing.assert_allclose(episode.actions, applied, atol=2e-4)  # float32 storage of the targets
    fast, _ = _pose_target_store(tmp_path / "fast.zarr", speed=4.0)
    with pytest.raises(AlignmentError, match=r"episode fast.zarr#0: .* beyond one step"):
        load_episodes(fast, cfg, 7, 10.0)


def test_closed_loop_settings_are_checked_before_anything_runs(tmp_path: Path) -> None:
    """Mistakes that would waste a long run stop at once: learners that would train on the real robot's
    stand-in, a learner without its start policy, evaluation seeds the actors train on, a nominal "real" robot."""
    from robot_rl.align.config import FinetuneSettings
    from robot_rl.align.finetune import finetune

    def cfg(**finetune_settings: object) -> AlignConfig:
        settings = {"online_config": "config/learners/online_quad_residual.yaml", **finetune_settings}
        return AlignConfig(holdout_episodes=1, collect=CollectSettings(episodes=3),
                           finetune=FinetuneSettings(**settings))  # type: ignore[arg-type]

    with pytest.raises(AlignmentError, match="is a stand-in"):  # the config as shipped trains on the stand-in
        finetune(cfg(), tmp_path)
    with pytest.raises(AlignmentError, match=r"finetune\.policy"):
        finetune(cfg(online_config="config/learners/online_pick_lift.yaml"), tmp_path)
    with pytest.raises(AlignmentError, match="overlaps the actors' training seeds"):
        finetune(cfg(online_overrides=["actor.env_id=robot_rl/QuadHover-v0"], eval_seed=150), tmp_path)
    with pytest.raises(ConfigError, match="nominal simulator"):
        FinetuneSettings(real_env_id="robot_rl/ArmPickLift-v0")
    with pytest.raises(ConfigError, match="online_parallel"):
        FinetuneSettings(online_parallel=0)
    assert not (tmp_path / "closed_loop.json").exists()
