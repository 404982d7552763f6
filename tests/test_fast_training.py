"""Fast checks of the offline diagnosis, the demo's "real robot" stages and the runtime package's lazy export.

The diagnosis is checked against a scripted policy that knows the toy task's expert (so the expected error
is known exactly); the demo stages against a stand-in for ``robot_rl.cli.demo.Demo`` and a recorded online
run (the full story with real training is tests/test_demo_real.py, slow).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.toy import expert_action, toy_dataset

from robot_rl.cli import demo_real, demo_rl
from robot_rl.learners.online import OnlineResult
from robot_rl.policies.mlp import MLPConfig, MLPPolicy
from robot_rl.training.diagnose import first_action_error
from robot_rl.training.evaluate import EvalReport


def scripted(policy: MLPPolicy, offset: np.ndarray) -> MLPPolicy:
    """``policy`` predicting the toy expert's action (plus ``offset``) for the current observation."""
    def predict_chunk(obs: dict[str, np.ndarray], num_steps: int | None = None, generator: Any = None,
                      task: Any = None) -> np.ndarray:
        pos, goal = obs["pos"][:, -1], obs["goal"][:, -1]
        first = np.stack([expert_action(p, g) for p, g in zip(pos, goal)]) + offset
        return np.repeat(first[:, None], policy.config.horizon, axis=1)

    policy.predict_chunk = predict_chunk  # type: ignore[method-assign, assignment]
    return policy


@pytest.fixture
def toy() -> tuple[MLPPolicy, Any]:
    data = toy_dataset(6, n_obs_steps=1, horizon=1, length=20)
    torch.manual_seed(0)
    policy = MLPPolicy(MLPConfig(hidden=(16,)), data.spec)
    policy.set_stats(data.stats())
    return policy, data


def test_first_action_error_is_zero_for_the_expert_and_the_offset_in_normalised_units(toy: tuple) -> None:
    """The first predicted action is compared with the demonstrated action of the same step (an off-by-one
    would not vanish: the expert's action changes along every episode); errors are in normalised units."""
    policy, data = toy
    exact = first_action_error(scripted(policy, np.zeros(2)), data, steps=(0, 5, 100))
    assert [e.step for e in exact] == [0, 5, 100] and all(e.episodes == 6 for e in exact)
    for e in exact:  # step 100 is past every episode's end: its last step
        np.testing.assert_allclose(e.error, 0.0, atol=1e-6)
        assert e.per_episode is not None and e.per_episode.shape == (6, 2)
    off = np.array([0.1, 0.0], np.float32)
    a = torch.zeros(1, 2)
    slope = (policy.normalizer.normalize("action", a + torch.as_tensor(off))
             - policy.normalizer.normalize("action", a)).abs().numpy()[0]
    (shifted,) = first_action_error(scripted(policy, off), data, steps=(3,))
    np.testing.assert_allclose(shifted.error, slope, rtol=1e-4, atol=1e-6)
    assert shifted.error[0] > 0 and shifted.error[1] == pytest.approx(0.0, abs=1e-6)
    assert shifted.summary(dims=(0,)) == f"step   3: first-action error {slope[0]:.3f} (dims [0], 6 episodes)"


def test_first_action_error_of_a_real_policy_is_finite_per_dimension(toy: tuple) -> None:
    policy, data = toy
    errors = first_action_error(policy, data, steps=(0, 10), seed=1)
    again = first_action_error(policy, data, steps=(0, 10), seed=1)
    for e, f in zip(errors, again):
        assert e.error.shape == (2,) and np.all(np.isfinite(e.error)) and np.all(e.error >= 0)
        np.testing.assert_array_equal(e.error, f.error)  # seeded: the same numbers twice


class FakeDemo:
    """What the real stages use of ``robot_rl.cli.demo.Demo``; evaluations are recorded, not run."""

    def __init__(self, out: Path) -> None:
        from robot_rl.cli.demo import DemoResults

        self.out, self.results = out, DemoResults()
        self.evaluated: list[tuple[str, Path | None, str]] = []
        self.settings = type("S", (), {"actors": 2, "overrides": ["learner.device=cpu"], "randomized_episodes": 7,
                                       "real_episodes": 5, "rl_method": "dsrl", "rl_episodes": 0,
                                       "rl_seconds": 30.0, "rl_overrides": ["learner.device=cpu"]})()

    def env_options(self) -> dict[str, Any]:
        return {}

    @property
    def demos(self) -> Path:
        return self.out / "demos.zarr"

    def fine_tuned(self) -> Path:
        return self.out / "online" / "weights" / "v3"

    def evaluate(self, name: str, policy_dir: Path | None = None, rl_run: Path | None = None,
                 env_id: str = "robot_rl/ArmPickLift-v0") -> EvalReport:
        self.evaluated.append((name, policy_dir, env_id))
        return EvalReport(env_id, seeds=[1, 2, 3, 4], successes=[True, True, False, True])


def publish(run: Path, *versions: int) -> None:
    for v in versions:
        (run / "weights" / f"v{v}").mkdir(parents=True)
        (run / "weights" / f"v{v}" / "policy.json").write_text("{}")


def test_real_stages_chain_each_stage_from_the_previous_ones_newest_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import robot_rl.learners.online as online

    runs: list[Any] = []

    def fake_run(cfg: Any, run: Path, timeout: float) -> OnlineResult:
        runs.append((cfg, run, timeout))
        eps = [{"steps": 10, "success": True, "intervention_steps": 5 * (i < 2), "takeovers": 0, "version_end": 1}
               for i in range(4)]
        return OnlineResult(eps, [{"updates": 12, "human_steps": 10, "version": 2}], 1.0)

    monkeypatch.setattr(online, "run_online", fake_run)
    demo = FakeDemo(tmp_path)
    assert demo_real.eval_real_start(demo) == "success 3/4 = 75% (95% CI 30%-95%)"
    (tmp_path / "randomized" / "stale").mkdir(parents=True)
    line = demo_real.randomized(demo)
    cfg, run, timeout = runs[-1]
    assert run == tmp_path / "randomized" and not (run / "stale").exists()  # a rerun starts clean
    assert cfg.policy == str(demo.fine_tuned()) and cfg.learner.demos == str(demo.demos)
    assert cfg.actor.episodes == 7 and cfg.actors == 2 and cfg.learner.device == "cpu" and timeout == 3600.0 + 70.0
    assert cfg.actor.env_options["randomization"]["damping_scale"] == [0.7, 2.5]  # the randomised simulator
    assert line == (f"4 episodes on {cfg.actor.env_id}, 12 updates, 10 human steps (last quarter 0%), weights v2")
    assert demo.results.real_runs["randomized"] is not None
    with pytest.raises(RuntimeError, match="published no weights"):
        demo_real.eval_randomized(demo)
    publish(tmp_path / "randomized", 2, 10, 9)
    (tmp_path / "randomized" / "weights" / "v11").mkdir()  # incomplete: no policy.json yet
    demo_real.eval_randomized(demo)
    demo_real.real_online(demo)
    cfg, run, _ = runs[-1]
    assert cfg.actor.env_id == demo_real.REAL_ENV_ID and cfg.policy == str(tmp_path / "randomized" / "weights" / "v10")
    publish(tmp_path / "real", 1)
    demo_real.eval_real_final(demo)
    assert demo.evaluated == [("real_start", demo.fine_tuned(), demo_real.REAL_ENV_ID),
                              ("real_randomized", tmp_path / "randomized" / "weights" / "v10", demo_real.REAL_ENV_ID),
                              ("real_final", tmp_path / "real" / "weights" / "v1", demo_real.REAL_ENV_ID)]


def test_rl_stages_run_on_the_fine_tuned_policy_and_evaluate_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nominal story's RL stage: the fine-tuned policy and the demonstrations, a wall-clock budget (or an
    episode budget with the learner paced), a clean run folder; its evaluation reads that run; 0 s skips both."""
    import robot_rl.learners.online as online

    runs: list[Any] = []

    def fake_run(cfg: Any, run: Path, budget_s: float | None = None, timeout: float = 0.0) -> OnlineResult:
        runs.append((cfg, run, budget_s, timeout))
        return OnlineResult([{"steps": 10, "success": True, "intervention_steps": 0, "takeovers": 0}] * 3,
                            [{"updates": 40, "human_steps": 0, "version": 2}], 1.0)

    monkeypatch.setattr(online, "run_online", fake_run)
    demo = FakeDemo(tmp_path)
    (tmp_path / "rl" / "stale").mkdir(parents=True)
    assert demo_rl.reinforcement(demo) == "dsrl: 3 episodes, 40 SAC updates, 0 human steps, v2"
    cfg, run, budget, timeout = runs[-1]
    assert run == tmp_path / "rl" and not (run / "stale").exists()
    assert cfg.policy == str(demo.fine_tuned()) and cfg.learner.demos == str(demo.demos)
    assert cfg.learner.algorithm == "dsrl" and cfg.learner.max_update_lag == 0 and (budget, timeout) == (30.0, 930.0)
    assert demo_rl.eval_rl(demo) == "success 3/4 = 75% (95% CI 30%-95%)"
    assert demo.evaluated[-1][0] == "rl" and demo.results.final is not None
    demo.settings.rl_episodes = 9
    demo_rl.reinforcement(demo)
    cfg, _, budget, timeout = runs[-1]
    assert cfg.actor.episodes == 9 and cfg.learner.max_update_lag == cfg.learner.publish_every
    assert budget is None and timeout == 3600.0 + 90.0
    demo.settings.rl_episodes, demo.settings.rl_seconds = 0, 0.0
    assert demo_rl.reinforcement(demo) == demo_rl.eval_rl(demo) == "skipped (--rl-seconds 0)" and len(runs) == 2


def test_summary_line_reads_back_the_stages_that_ran(tmp_path: Path) -> None:
    assert demo_real.summary_line(tmp_path) is None
    for name, rate in (("real_start", 0.25), ("real_final", 0.9)):
        (tmp_path / f"eval_{name}").mkdir()
        (tmp_path / f"eval_{name}" / "eval.json").write_text(json.dumps({"success_rate": rate}))
    assert demo_real.summary_line(tmp_path) == (f"on the robot that plays the real one ({demo_real.REAL_ENV_ID}): "
                                                "25% nominal HG-DAgger -> 90% fine-tuned on it")


def test_the_runtime_package_loads_its_policy_runner_on_first_use() -> None:
    import robot_rl.runtime as runtime
    from robot_rl.runtime.policy_runner import PolicyRunner

    assert runtime.PolicyRunner is PolicyRunner
    assert "PolicyRunner" in runtime.__all__ and "robot_rl.runtime.policy_runner" in sys.modules
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        _ = runtime.Nothing
