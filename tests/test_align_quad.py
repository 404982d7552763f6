"""End to end on the quadrotor: record motions on a "real robot" whose perturbations only this test knows, then
measure the gap, fit every method through ``robot-rl align`` and check ASAP's claim on held-out motions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from robot_rl.cli.main import main

pytestmark = pytest.mark.timeout(1800)  # a few minutes per test alone; under pytest-xdist they share the cores

REAL_ROBOT = {  # heavier, weaker, slower motors, a delay, two mismatched rotors, command noise
    "mass_scale": [1.12, 1.12], "actuator_gain_scale": [0.94, 0.94], "motor_time_constant_s": [0.03, 0.03],
    "latency_s": [0.004, 0.004], "actuator_gains": [1.02, 0.98, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    "action_noise_std": 0.005}


def align(action: str, config: Path, folder: Path, *extra: str) -> int:
    return main(["align", action, "--config", str(config), "--run", str(folder), "--no-progress", *extra])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """Collect, gap, fit all methods, evaluate: (config, run folder, the nominal gap)."""
    folder = tmp_path_factory.mktemp("align_quad")
    cfg = yaml.safe_load(Path("config/align/quad.yaml").read_text())
    cfg["collect"].update(env_id="robot_rl/QuadHover-v0", env_options={"randomization": REAL_ROBOT})
    config = folder / "quad.yaml"
    config.write_text(yaml.safe_dump(cfg))
    assert align("collect", config, folder) == 0
    assert align("gap", config, folder) == 0
    gap = json.loads((folder / "open_loop.json").read_text())["methods"]["nominal"]
    assert align("fit", config, folder) == 0
    assert align("eval", config, folder) == 0
    return config, folder, gap


@pytest.mark.slow
def test_delta_action_closes_most_of_the_gap_on_held_out_motions(fitted: tuple[Path, Path, dict]) -> None:
    _, folder, gap = fitted
    assert gap["position"]["at_end"] > 0.3  # the nominal sim drifts far from the recorded motions in 1 s
    result = json.loads((folder / "open_loop.json").read_text())["methods"]
    table = json.dumps({m: {e: round(r[e]["at_end"], 4) for e in ("position", "attitude")} for m, r in result.items()})
    mean = {m: r["position"]["mean"] for m, r in result.items()}
    end = {m: r["position"]["at_end"] for m, r in result.items()}
    assert set(mean) == {"nominal", "dr", "sysid", "delta_dynamics", "delta_action"}
    assert mean["delta_action"] <= 0.5 * mean["nominal"], table  # ASAP's claim: at least halves the gap
    assert end["delta_action"] < end["sysid"] and end["delta_action"] < end["dr"], table
    assert result["delta_action"]["diverged"] == 0
    for name in ("open_loop.png", "overlay.png"):
        assert (folder / name).stat().st_size > 10_000
    identified = json.loads((folder / "sysid" / "fit.json").read_text())["parameters"]
    assert abs(identified["mass_scale"] - 1.12) < 0.05 and abs(identified["actuator_gain_scale"] - 0.94) < 0.03
    assert abs(identified["latency_s"] - 0.004) < 0.0015  # what SysID can express, it recovers
    fitted_da = json.loads((folder / "delta_action" / "fit.json").read_text())
    assert fitted_da["fit"] == "ppo" and fitted_da["reward_last"] > fitted_da["reward_first"]
    assert any((folder / "tensorboard" / "sysid").iterdir())


@pytest.mark.slow
def test_finetune_trains_in_each_aligned_simulator_and_flies_on_the_real_robot(
        fitted: tuple[Path, Path, dict]) -> None:
    """The closed-loop plumbing with small budgets: one pre-training, one fine-tune per simulator (each in the
    simulator it names), every policy flown on the real robot. Budgets too small to compare the methods; they
    count env steps, not seconds, so the outcome does not depend on the machine's load."""
    config, folder, _ = fitted
    budget = ["--set", "finetune.online_config=''",  # the PPO path: rl_config's policy, fine-tuned
              "--set", "finetune.overrides=[time_budget_s=null,target_success=null,total_steps=400000,"
              "eval_episodes=4,eval_every_steps=200000]",
              "--set", "finetune.finetune_overrides=[time_budget_s=null,total_steps=4096,num_envs=16,eval_episodes=4,"
              "eval_every_steps=4096,ppo.critic_warmup_updates=1]",
              "--set", "finetune.eval_episodes=4", "--set", "finetune.methods=[nominal,sysid,delta_action]"]
    assert align("finetune", config, folder, *budget) == 0
    summary = json.loads((folder / "closed_loop.json").read_text())
    assert summary["kind"] == "rl" and list(summary["methods"]) == ["pretrained", "nominal", "sysid", "delta_action"]
    for row in summary["methods"].values():
        assert row["real"]["length_mean"] > 0 and 0.0 <= row["real"]["error_mean"] < 3.0
    runs = folder / "finetune"
    options = {m: yaml.safe_load((runs / m / "rl_config.yaml").read_text())
               for m in ("nominal", "sysid", "delta_action")}
    assert all(o["init_policy"] == str(runs / "pretrained" / "policy") for o in options.values())
    assert "delta_action" not in options["nominal"]["env_options"]
    assert Path(options["delta_action"]["env_options"]["delta_action"]) == (folder / "delta_action").resolve()
    assert options["sysid"]["env_options"]["randomization"]["mass_scale"][0] == pytest.approx(
        json.loads((folder / "sysid" / "fit.json").read_text())["parameters"]["mass_scale"])


@pytest.mark.slow
def test_residual_trained_in_the_identified_simulator_removes_the_real_robots_sag(
        fitted: tuple[Path, Path, dict]) -> None:
    """ASAP's closed-loop claim with an online learner: residual RL on the hover expert for the same number of
    episodes in the nominal and in the identified simulator, then expert + residual flown on the real robot.
    The heavier, weaker real robot makes the expert sag; the nominal simulator has no sag to learn from."""
    config, folder, _ = fitted
    # paced (learner.max_update_lag): 0.08 updates per step whatever this machine's speed, ~2300 per method.
    # One method after the other: trained at once (finetune.online_parallel=2, 163 s instead of ~250 s) the
    # sysid residual reached 1.5 cm in one run and 3.9 cm (nominal 6.7) in the next, failing the 0.5 x nominal
    # bound. Episodes per method (sysid vs nominal sag, one fixture): 150: 1.7 and 2.5 cm (6.9); 120: 1.4 cm
    # (10.0), 202 s; 100: 0.4 and 1.1 cm (12.4, 11.7), 163-188 s; 75: 11.2 cm (36.1), fails: not learned yet.
    args = ["--set", "finetune.online_overrides=[actor.env_id=robot_rl/QuadHover-v0,actor.episodes=120,"
            "learner.update_to_data=0.08,learner.max_update_lag=20]",
            "--set", "finetune.online_budget_s=1200", "--set", "finetune.eval_episodes=5",
            "--set", "finetune.methods=[nominal,sysid]"]
    assert align("finetune", config, folder, *args) == 0
    summary = json.loads((folder / "closed_loop.json").read_text())
    rows = summary["methods"]
    assert summary["kind"] == "online" and list(rows) == ["frozen", "nominal", "sysid"]
    sag = {m: r["real"]["metric"] for m, r in rows.items()}
    assert all(r["real"]["failure_rate"] == 0.0 for r in rows.values()), rows
    assert sag["frozen"] > 0.1, sag                      # the expert alone sags > 10 cm on the real robot
    assert rows["frozen"]["sim"]["metric"] < 0.01, rows   # ... and not in the nominal simulator
    # sysid / nominal sag over runs here: 0.25, 0.14, 0.03, 0.09, 0.56 (CI: 3.5 vs 6.3 cm); 0.7 keeps the claim
    # (the identified simulator removes clearly more sag than the nominal one) above that run-to-run spread.
    assert sag["sysid"] < 0.35 * sag["frozen"] and sag["sysid"] < 0.7 * sag["nominal"], sag
    for m in ("nominal", "sysid"):  # each learner ran in the simulator it names
        online = yaml.safe_load((folder / "finetune" / f"residual_{m}" / "online.yaml").read_text())
        assert ("randomization" in online["actor"]["env_options"]) == (m == "sysid")
    assert (folder / "closed_loop.png").stat().st_size > 10_000


def test_replay_step_is_the_full_step_without_its_outcome() -> None:
    """The replays' physics-only step (``outcome=False``) moves the simulator exactly as ``env.step``."""
    import gymnasium as gym
    import numpy as np

    import robot_rl.sim  # noqa: F401
    from robot_rl.sim.threaded import PhysicsPool

    envs = [gym.make("robot_rl/QuadHover-v0", randomization=REAL_ROBOT).unwrapped for _ in range(4)]
    pool = PhysicsPool(2)
    try:
        for env in envs:
            env.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(30):
            actions = rng.uniform(envs[0].action_space.low, envs[0].action_space.high, (2, 4)).astype(np.float32)
            full = pool.step(envs[:2], actions)
            bare = pool.step(envs[2:], actions, outcome=False)
            for a, b, f, r in zip(envs[:2], envs[2:], full, bare):
                assert np.array_equal(a.data.qpos, b.data.qpos) and np.array_equal(a.data.qvel, b.data.qvel)
                assert np.array_equal(a.data.ctrl, b.data.ctrl)
                assert r[1:4] == (0.0, False, False) and f[3] is False
    finally:
        pool.close()


def test_fits_run_torch_on_one_thread_and_restore_the_callers_setting() -> None:
    import torch

    from robot_rl.align.pipeline import one_torch_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
