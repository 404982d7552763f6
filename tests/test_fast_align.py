"""Sim-to-real alignment methods on tiny problems (fast tier): each fit recovers a perturbation only the test knows.

The "real robot" is the nominal quadrotor with one known change: its commands shifted by a fixed thrust offset
(the delta-action model must find the offset) or weaker motors (system identification must find the gain, the
delta-dynamics residual must close the replay gap). Two short excited hover episodes; the end-to-end runs with
realistic budgets are tests/test_align_quad.py's (slow).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401  (registers the env ids)
from robot_rl.align import artifacts, delta_action, delta_dynamics, sysid
from robot_rl.align.config import AlignConfig, CollectSettings, DeltaActionSettings, ModelSettings, SysIDSettings
from robot_rl.align.episodes import Episode, segments
from robot_rl.align.layout import layout_for
from robot_rl.align.replay import Replayer
from robot_rl.sim.alignment import AlignmentError
from robot_rl.sim.config import Randomization
from robot_rl.sim.experts import expert_for

THRUST_OFFSET = -0.05
"""What the real robot adds to every collective-thrust command (a fraction of the thrust range, which is 1)."""
REAL_GAIN = 0.85
"""The real robot's actuator gain (nominal 1)."""
SKIP = 5
"""Steps after reset the per-step corrections leave out (the motors' spin-up from the reset state)."""


def record(steps: int, offset: np.ndarray | None = None, gain: float | None = None, episodes: int = 2,
           seed: int = 0) -> list[Episode]:
    """Excited hover episodes of the "real robot": the actions recorded are the ones before its perturbation."""
    options: dict[str, Any] = {"randomization": {"actuator_gain_scale": [gain, gain]}} if gain is not None else {}
    env: Any = gym.make("robot_rl/QuadHover-v0", **options).unwrapped
    lay, expert, rng = layout_for("cf2x"), expert_for(env), np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        qpos, qvel, actions = [env.data.qpos[lay.qpos_index].copy()], [env.data.qvel[lay.qvel_index].copy()], []
        for _ in range(steps):
            a = np.clip(expert.act(obs) + rng.normal(0.0, 0.02, 4) * (high - low), low, high)
            applied = a if offset is None else np.clip(a + offset, low, high)
            obs, *_ = env.step(applied.astype(np.float32))
            actions.append(a)
            qpos.append(env.data.qpos[lay.qpos_index].copy())
            qvel.append(env.data.qvel[lay.qvel_index].copy())
        out.append(Episode(f"real#{i}", np.array(qpos), np.array(qvel), np.array(actions, np.float64)))
    env.close()
    return out


@pytest.fixture(scope="module")
def replayer() -> Iterator[Replayer]:
    rep = Replayer(AlignConfig(holdout_episodes=1, collect=CollectSettings(episodes=3, steps=30)), 8, nthread=1)
    yield rep
    rep.close()


@pytest.fixture(scope="module")
def weak_motors() -> list[Episode]:
    return record(40, gain=REAL_GAIN)


def test_inverse_targets_find_the_real_robots_command_offset(replayer: Replayer) -> None:
    """Per-step corrections are the offset the real robot adds (as a fraction of the range), zero without one,
    and only on the components ``dims`` frees; the regression then predicts that offset."""
    offset = np.array([THRUST_OFFSET, 0.0, 0.0, 0.0])
    shifted, plain = record(30, offset=offset), record(30)
    settings = DeltaActionSettings(dims=[0], model=ModelSettings(hidden=(16,), epochs=40, learning_rate=2e-2))
    np.testing.assert_allclose(delta_action.correction_scale(replayer, settings), [0.3, 0.0, 0.0, 0.0])
    x, y = delta_action.inverse_targets(replayer, shifted, settings)
    _, y_plain = delta_action.inverse_targets(replayer, plain, settings)
    assert x.shape == (60, replayer.layout.feature_dim + 8) and y.shape == (60, 4)
    steady = np.r_[SKIP:30, 30 + SKIP:60]
    assert np.all(y[:, 1:] == 0.0)  # excluded components stay as commanded
    assert abs(np.median(y[steady, 0]) - THRUST_OFFSET) < 0.015, y[steady, 0]
    assert abs(np.median(y_plain[steady, 0])) < 0.005, y_plain[steady, 0]  # the nominal robot needs none

    model, report = delta_action.fit_inverse(replayer, shifted, settings, device="cpu", progress=False)
    assert report.method == "inverse" and report.detail["final_loss"] < report.detail["first_loss"]
    assert report.sim_steps == 60 * 2 * 5 + 60  # (1 free component + base) probes x 5 look-ahead steps, + pass
    predict = delta_action.delta_fn(model)
    ep = shifted[0]
    delta = predict(replayer.layout.features(ep.qpos[:-1], ep.qvel[:-1]), ep.actions,
                    np.concatenate([ep.actions[:1], ep.actions[:-1]]))
    assert abs(np.mean(delta[SKIP:, 0]) - THRUST_OFFSET) < 0.02 and np.all(delta[:, 1:] == 0.0)
    with pytest.raises(ValueError, match="outside the 4 action components"):
        delta_action.correction_scale(replayer, DeltaActionSettings(dims=[4]))


def test_ppo_fit_runs_its_replays_and_exports_a_bounded_model(replayer: Replayer,
                                                              weak_motors: list[Episode]) -> None:
    """ASAP's PPO fit for two updates' worth of steps: a CPU model whose corrections stay within max_delta."""
    seg = segments(weak_motors, 10, warmup=5)
    settings = DeltaActionSettings(ppo_steps=2 * 8 * 10, ppo_envs=8, max_delta=0.2, model=ModelSettings(hidden=(16,)))
    model, report = delta_action.fit_ppo(replayer, seg, settings, device="cpu", progress=False)
    assert report.method == "ppo" and report.sim_steps >= settings.ppo_steps
    assert np.isfinite(report.detail["reward_first"]) and np.isfinite(report.detail["reward_last"])
    q, v = seg.open_loop()
    delta = model.predict(replayer.layout.features(q[:, 0], v[:, 0]), seg.actions[:, 5], seg.actions[:, 4])
    assert delta.shape == (len(seg), 4)
    assert np.all(np.abs(delta) <= 0.2 * (replayer.high - replayer.low) + 1e-6)


def test_sysid_recovers_the_real_robots_actuator_gain(replayer: Replayer, weak_motors: list[Episode]) -> None:
    """CMA-ES over the gain and a parameter the quadrotor barely feels (joint damping): the gain comes out."""
    seg = segments(weak_motors, 10, warmup=5)
    settings = SysIDSettings(parameters={"actuator_gain_scale": [0.7, 1.3], "damping_scale": [0.3, 3.0]},
                             generations=6, population=6, segments=4)
    res = sysid.identify(replayer, seg, settings, seed=0, progress=False)
    assert abs(res.parameters["actuator_gain_scale"] - REAL_GAIN) < 0.03, res.parameters
    assert res.randomization.actuator_gain_scale == (res.parameters["actuator_gain_scale"],) * 2  # collapsed range
    assert res.best_cost < 0.6 * res.nominal_cost
    assert len(res.history) == 6 and all(b <= a for a, b in zip(res.history, res.history[1:]))
    assert res.replay_steps == 6 * 6 * 4 * (5 + 10)


def test_candidate_maps_the_unit_box_onto_the_bounds() -> None:
    settings = SysIDSettings(parameters={"mass_scale": [0.5, 1.5], "latency_s": [0.0, 0.02]})
    values, dyn = sysid.candidate(Randomization(), settings, np.array([0.25, 1.7]))
    assert values == pytest.approx({"mass_scale": 0.75, "latency_s": 0.02})  # 1.7 clipped to the box
    assert dyn.mass_scale == (0.75, 0.75) and dyn.latency_s == pytest.approx((0.02, 0.02))


def test_delta_dynamics_learns_the_residual_that_closes_the_replay_gap(replayer: Replayer,
                                                                       weak_motors: list[Episode]) -> None:
    """Recorded in the nominal simulator the one-step residuals are exactly zero; on the weak robot they are not,
    and the fitted residual, added after every replayed step, shrinks the open-loop position gap."""
    _, zero = delta_dynamics.transition_residuals(replayer, record(20, episodes=1))
    assert np.abs(zero).max() == 0.0
    x, y = delta_dynamics.transition_residuals(replayer, weak_motors)
    assert x.shape[0] == y.shape[0] == 80 and y.shape[1] == replayer.layout.nq + replayer.layout.nv
    assert np.abs(y).max() > 1e-3
    model, report = delta_dynamics.fit_delta_dynamics(
        replayer, weak_motors, ModelSettings(hidden=(32,), epochs=60, learning_rate=1e-2), device="cpu",
        progress=False)
    assert report.final_loss < 0.5 * report.first_loss
    seg = segments(weak_motors, 10, warmup=5)
    plain = replayer.gap(seg, replayer.replay(seg))
    corrected = replayer.gap(seg, replayer.replay(seg, correct=delta_dynamics.corrector(model, replayer)))
    assert corrected.mean("position") < 0.3 * plain.mean("position"), (corrected.mean("position"),
                                                                      plain.mean("position"))


def test_read_sysid_returns_the_identified_dynamics_and_names_a_malformed_field(tmp_path: Path) -> None:
    meta = {"robot": "cf2x", "fps": 50.0, "randomization": {"mass_scale": [1.1, 1.1], "latency_s": [0.004, 0.004]}}
    folder = artifacts.save_artifact(tmp_path / "sysid", "sysid", meta)
    dyn = artifacts.read_sysid(folder, "cf2x", 50.0)
    assert dyn.mass_scale == (1.1, 1.1) and dyn.latency_s == (0.004, 0.004) and dyn.actuator_gain_scale == (1.0, 1.0)
    with pytest.raises(AlignmentError, match="robot 'cf2x', used with 'g1'"):
        artifacts.read_sysid(folder, "g1")
    bad = artifacts.save_artifact(tmp_path / "bad", "sysid", {**meta, "randomization": {"mass_scal": [1, 1]}})
    with pytest.raises(AlignmentError, match="field 'randomization' is malformed"):
        artifacts.read_sysid(bad, "cf2x")
    missing = artifacts.save_artifact(tmp_path / "missing", "sysid", {"robot": "cf2x", "fps": 50.0})
    with pytest.raises(AlignmentError, match="field 'randomization' is malformed"):
        artifacts.read_sysid(missing, "cf2x")
