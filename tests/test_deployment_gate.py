"""The deployment gate: verdicts on candidates from their clean episodes, early refusal, mixed and human
episodes, its state across a restart, and the learner's side (held-back publishes, taken-back versions with
the deployed weights, DSRL's way back to the base's own noise, an unfinished trial at the end)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file
from test_learner_dsrl_online import interleaved, toy_base

from robot_rl.core.config import load_config
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.algorithms.dsrl_online import MARKER, WEIGHTS, DSRLAgent, NoiseActorWeights
from robot_rl.learners.deployment_gate import DeploymentGate, GateConfig
from robot_rl.learners.learner_process import OnlineLearner
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.weights import list_versions
from robot_rl.training.evaluate import wilson_interval


def episode(ep: int, version: int, success: bool, length: int = 6, human: bool = False,
            switch: int | None = None) -> list[Transition]:
    """A toy episode acted by ``version`` (``switch``: from that step on by ``version + 1``); success shows as
    ``pos[0] > 0.5`` in the last observation; ``human``: its middle step is a human's."""
    out = []
    for k in range(length):
        x = 0.9 if success and k == length - 1 else 0.0
        is_human = human and k == length // 2
        v = version + 1 if switch is not None and k >= switch else version
        out.append(Transition({"pos": np.zeros(2, np.float32)}, {"pos": np.array([x, 0.0], np.float32)},
                              np.zeros(2, np.float32), 0.0, False, k == length - 1, ep, k,
                              is_intervention=is_human,
                              segment_source=SegmentSource.HUMAN if is_human else SegmentSource.POLICY,
                              policy_version=v))
    return out


def succeeded(ep: list[Transition]) -> bool:
    return any(float(t.next_observation["pos"][0]) > 0.5 for t in ep)


def feed(gate: DeploymentGate, version: int, outcomes: list[bool], start: int = 0) -> list[object]:
    """Observe one episode per outcome; the verdicts that came, in order, with the episode they came after."""
    verdicts = []
    for i, ok in enumerate(outcomes):
        gate.observe(episode(start + i, version, ok), ok)
        d = gate.decide()
        if d is not None:
            verdicts.append((i, d))
    return verdicts


def test_a_candidate_as_good_as_the_best_is_kept_and_a_worse_one_refused_at_its_first_hopeless_episode() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10))
    gate.started(1)
    assert not gate.may_publish()  # the deployed version is not measured yet
    feed(gate, 1, [True] * 10)
    assert gate.may_publish() and gate.rate(1) == 1.0
    gate.published(2)
    assert not gate.may_publish()  # one candidate at a time
    (i, d), = feed(gate, 2, [True] * 10, start=100)
    assert i == 9 and d.kept and gate.incumbent == 2  # decided after its 10th clean episode, not before
    feed(gate, 2, [True] * 10, start=200)  # the deployed rate is 20/20 = 1.0
    gate.published(3)
    (i, d), = feed(gate, 3, [True, True, False, True], start=300)
    # against 1.0 even 9/10 is too few (Wilson upper bound 0.96): refused at the first failure
    assert i == 2 and not d.kept and gate.incumbent == 2 and gate.candidate is None
    assert d.successes == 2 and d.episodes == 3 and d.upper < d.incumbent_rate == 1.0 and d.back_to == 2


def test_within_the_noise_of_its_own_estimate_a_candidate_is_kept() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10))
    gate.started(1)
    feed(gate, 1, [True] * 7 + [False] * 3)
    gate.published(2)
    (_, d), = feed(gate, 2, [True] * 6 + [False] * 4, start=50)
    assert d.kept  # 6/10 against 0.7: its interval's upper end (0.83) reaches it
    gate.published(3)
    (i, d), = feed(gate, 3, [False] * 10, start=80)
    assert not d.kept and i < 9  # hopeless before the end of its trial
    # a refused candidate's replacement carries the deployed weights: its episodes count for them
    gate.republished(4, gate.incumbent)
    before = gate.counts(2)
    feed(gate, 4, [True, False], start=120)
    assert gate.counts(2) == (before[0] + 1, before[1] + 2)


def test_a_deployed_version_that_turns_out_worse_than_the_best_is_withdrawn_for_it() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10))
    gate.started(1)
    feed(gate, 1, [True] * 9 + [False])  # 9/10
    gate.published(2)
    (_, d), = feed(gate, 2, [True] * 8 + [False] * 2, start=50)
    assert d.kept and gate.incumbent == 2 and gate.best() == 1  # 8/10 is within the noise of 0.9, not the best
    verdicts = feed(gate, 2, [False] * 10, start=100)
    (i, w), = verdicts
    # withdrawn once its own interval's upper end falls below v1's 0.9, not before, and v1 is deployed again
    assert w.kind == "watch" and not w.kept and w.back_to == 1 and gate.incumbent == 1
    k, n = 8, 10 + i + 1
    assert wilson_interval(k, n)[1] < 0.9 <= wilson_interval(k, n - 1)[1]
    assert gate.decide() is None  # v1 is the best and deployed: nothing to withdraw


def test_mixed_version_episodes_count_for_nobody_and_a_human_step_is_a_failure_of_the_policy() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=2))
    gate.started(1)
    gate.observe(episode(0, 1, True, switch=3), True)  # swapped mid-episode
    gate.observe(episode(1, 7, True), True)  # a version the gate never saw
    assert gate.counts(1) == (0, 0)
    gate.observe(episode(2, 1, True, human=True), True)  # the task succeeded, with help
    gate.observe(episode(3, 1, True), True)
    assert gate.counts(1) == (1, 2)


def test_the_run_ending_mid_trial_refuses_the_candidate_and_the_state_survives_a_restart() -> None:
    cfg = GateConfig(enabled=True, trial_episodes=5)
    gate = DeploymentGate(cfg)
    gate.started(1)
    feed(gate, 1, [True] * 5)
    gate.published(2)
    feed(gate, 2, [True] * 3, start=10)
    again = DeploymentGate.restore(cfg, json.loads(json.dumps(gate.state())))
    assert again.state() == gate.state() and again.candidate == 2
    d = again.decide(finish=True)
    assert d is not None and not d.kept and "ended" in d.reason and again.incumbent == 1


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="trial_episodes"):
        GateConfig(trial_episodes=0)
    with pytest.raises(ValueError, match="confidence"):
        GateConfig(confidence=1.0)
    assert abs(GateConfig(confidence=0.95).z - 1.96) < 1e-3


# ------------------------------------------------------------------------------------------ the learner's side
def gated_learner(tmp: Path, monkeypatch: pytest.MonkeyPatch, trial: int = 4) -> OnlineLearner:
    """A DSRL learner on the toy base whose task succeeds when ``pos[0] > 0.5`` (the rule patched in)."""
    import robot_rl.learners.learner_process as lp

    monkeypatch.setattr(lp, "observed_success", lambda env_id: lambda obs: float(obs["pos"][0]) > 0.5)
    toy_base().save(tmp / "policy")
    cfg = load_config(OnlineConfig, None, [
        f"policy={tmp / 'policy'}", "learner.algorithm=dsrl", "learner.device=cpu", "learner.dsrl.warmup_steps=10",
        "learner.dsrl.batch_size=16", "learner.dsrl.latent.hidden=32", "learner.gate.enabled=true",
        f"learner.gate.trial_episodes={trial}"])
    return OnlineLearner(cfg, tmp / "run")


def play(learner: OnlineLearner, version: int, outcomes: list[bool], start: int) -> list[dict]:
    """Episodes of ``version`` into the learner; the gate lines they brought into its log."""
    log = learner.run_dir / "learner_log.jsonl"
    before = log.read_text().count("\n") if log.exists() else 0
    for i, ok in enumerate(outcomes):
        learner.add(episode(start + i, version, ok))
    lines = [json.loads(x) for x in log.read_text().splitlines()[before:]] if log.exists() else []
    return [x for x in lines if "gate" in x]


def test_the_learner_holds_candidates_back_takes_refused_ones_back_and_keeps_the_deployed_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = gated_learner(tmp_path, monkeypatch)
    weights = tmp_path / "run" / "weights"
    learner.add(interleaved(np.random.default_rng(0)))  # past DSRL's warm-up (their versions are -1: not counted)
    learner.train(learner.train_allowed())
    assert learner.publish() == 0  # the start (the base's own noise) is not measured yet: nothing goes out
    play(learner, 0, [True] * 4, start=1000)
    assert learner.publish() == 1  # v1 on trial
    learner.train(2)
    assert learner.publish() == 1  # held back while v1 is on trial
    (line,) = play(learner, 1, [True, False], start=2000)
    assert line["gate"] == "refused" and line["candidate"] == 1 and line["published"] == 2 and line["back_to"] == 0
    # taken back: v2 is the run's start again, which the actors' agent runs as the base's own noise
    assert [v for v, _ in list_versions(weights, MARKER)] == [1, 2]
    back = NoiseActorWeights.load(weights / "v2")
    assert back.actor is None and back.version == 2
    agent = DSRLAgent(toy_base(), weights_dir=weights)
    agent.poll_weights()
    assert agent.version == 2 and agent._noise({"pos": np.zeros((2, 2), np.float32)}) is None
    # the next candidate may go out at once (the start has its 4 episodes); this one is kept
    learner.train(2)
    assert learner.publish() == 3
    (line,) = play(learner, 3, [True] * 4, start=3000)
    assert line["gate"] == "kept" and learner.gate is not None and learner.gate.deployed == 3
    kept = load_file(str(tmp_path / "run" / "deployed" / "v3" / WEIGHTS))
    play(learner, 3, [True] * 4, start=4000)
    learner.train(2)
    assert learner.publish() == 4
    (line,) = play(learner, 4, [False], start=5000)
    assert line["gate"] == "refused"
    v5 = weights / "v5"  # v3's weights, published again as v5
    assert json.loads((v5 / MARKER).read_text())["version"] == 5
    again = load_file(str(v5 / WEIGHTS))
    assert all(np.array_equal(again[k].numpy(), kept[k].numpy()) for k in kept)
    # a restarted learner knows what is deployed and that v5 carries v3's weights
    learner.checkpoint()
    restarted = gated_learner(tmp_path, monkeypatch)
    assert restarted.gate is not None and restarted.gate.deployed == 3
    assert restarted.gate.gate.identity[5] == 3
    # a candidate still on trial when the run ends is taken back: the newest version is the deployed one
    restarted.train(2)
    assert restarted.publish() == 6
    play(restarted, 6, [True], start=6000)
    decision = restarted.gate.finish()
    assert decision is not None and not decision.kept
    newest = list_versions(weights, MARKER)[-1]
    assert newest[0] == 7 and load_file(str(newest[1] / WEIGHTS)).keys() == kept.keys()
