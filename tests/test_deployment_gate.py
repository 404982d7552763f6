"""The deployment gate: verdicts on trials from their hands-off clean episodes, early refusal, the bar of the
best version, the best kept version deployed, kept versions tried again until a lucky trial is found out,
mixed and human episodes, its state across a restart, the actors' hands-off rule, and the learner's side
(trials held apart by a gap, the deployed weights published again after every verdict, DSRL's start as the
base's own noise, a kept version's weights on trial again, an unfinished trial at the end)."""

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
from robot_rl.learners.deployment_gate import Decision, DeploymentGate, GateConfig, GatedPublisher, on_trial
from robot_rl.learners.learner_process import OnlineLearner
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.runtime.weights import WeightsPublisher, list_versions


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


def feed(gate: DeploymentGate, version: int, outcomes: list[bool], start: int = 0) -> list[tuple[int, Decision]]:
    """Observe one episode per outcome; the verdicts that came, with the index of the episode they came after."""
    verdicts = []
    for i, ok in enumerate(outcomes):
        gate.observe(episode(start + i, version, ok), ok)
        d = gate.decide()
        if d is not None:
            verdicts.append((i, d))
    return verdicts


def started(gate: DeploymentGate, outcomes: list[bool]) -> None:
    """v1 is the run's start, measured by ``outcomes``; then deployed as v2, which acts the gap."""
    gate.published(1)
    assert not gate.may_publish()  # the start is on trial
    (_, d), = feed(gate, 1, outcomes)
    assert d.kept and d.back_to == 1 and gate.incumbent == 1
    gate.republished(2, 1)
    assert gate.may_publish() == (gate.config.gap_episodes == 0)  # the gap: the deployed one acts with the human
    feed(gate, 2, [False] * gate.config.gap_episodes, start=900)  # not a trial: they count for nobody
    assert gate.counts(1) == (sum(outcomes), len(outcomes)) and gate.may_publish()


def test_a_candidate_as_good_as_the_best_is_kept_and_a_worse_one_refused_at_its_first_hopeless_episode() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10, start_episodes=20, gap_episodes=3,
                                     retry_until=0))
    started(gate, [True] * 20)
    gate.published(3)
    assert not gate.may_publish()  # one trial at a time
    (i, d), = feed(gate, 3, [True] * 10, start=100)
    assert i == 9 and d.kept  # after its 10th episode, not before
    assert gate.incumbent == 1 and d.back_to == 1  # 20/20 is surer than 10/10: the start stays deployed
    gate.republished(4, 1)
    feed(gate, 4, [True] * 3, start=200)
    gate.published(5)
    (i, d), = feed(gate, 5, [True, True, False, True], start=300)
    # against 1.0 even 9/10 is too few (Wilson upper bound 0.98): refused at the first failure
    assert i == 2 and not d.kept and gate.incumbent == 1 and gate.candidate is None
    assert d.successes == 2 and d.episodes == 3 and d.upper < d.incumbent_rate == 1.0 and d.back_to == 1
    assert gate.to_retry() is None  # retry_until=0: kept versions are never tried again


def test_within_the_noise_of_its_own_estimate_a_candidate_is_kept_and_the_best_stays_deployed() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10, start_episodes=10, gap_episodes=0,
                                     retry_until=0))
    started(gate, [True] * 7 + [False] * 3)
    gate.published(3)
    (_, d), = feed(gate, 3, [True] * 6 + [False] * 4, start=50)
    assert d.kept  # 6/10 against 0.7: its interval's upper end (0.83) reaches it
    assert gate.best() == 1 and gate.incumbent == 1 and d.back_to == 1  # v1's lower bound (0.40) beats v3's (0.31)
    gate.published(4)
    (_, d), = feed(gate, 4, [True] * 4 + [False] * 6, start=80)
    assert not d.kept and d.incumbent == 1 and d.incumbent_rate == 0.7 and d.back_to == 1


def test_a_lucky_trial_is_found_out_when_its_version_is_tried_again() -> None:
    """The winner's curse: a version at 60 % passes 10/10 once in 170 trials, and a learner makes many. Kept
    versions are tried again every other trial until their record is long enough to rank them."""
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=10, start_episodes=10, gap_episodes=0,
                                     retry_until=30))
    started(gate, [True] * 9 + [False])
    assert gate.to_retry() is None  # after the start's trial the newest goes first
    gate.published(3)
    (_, d), = feed(gate, 3, [True] * 10, start=100)
    assert d.kept and gate.incumbent == 3 and d.back_to == 3  # 10/10 (lower bound 0.72) beats 9/10 (0.60)
    gate.republished(4, 3)
    assert gate.contending() == [1, 3] and gate.to_retry() == 3  # fewest episodes; a tie goes to the higher upper end
    gate.retried(5, 3)
    assert not gate.may_publish()
    (i, d), = feed(gate, 5, [True] + [False] * 9, start=200)  # no early end: a retrial only adds to the record
    assert i == 9 and d.retrial and d.line()["gate"] == "retried" and gate.counts(3) == (11, 20)
    assert gate.incumbent == 1 and d.back_to == 1  # 11/20 (lower bound 0.34) is now below the start's 9/10 (0.60)
    gate.republished(6, 1)
    assert gate.to_retry() is None  # every other trial at most: now the newest
    gate.published(7)
    (_, d), = feed(gate, 7, [False] * 5, start=300)
    assert not d.kept
    assert gate.to_retry() == 1  # v1 (10 episodes) before v3 (20)
    gate.retried(8, 1)
    again = DeploymentGate.restore(gate.config, json.loads(json.dumps(gate.state())))  # a restart mid-retrial
    (_, d), = feed(again, 8, [True] * 10, start=400)
    assert d.retrial and again.counts(1) == (19, 20) and again.incumbent == 1
    # v3's upper end (0.74) no longer reaches v1's lower bound (0.76): out of the running, its copy kept as 2nd best
    assert again.contending() == [1] and again.keep_copies() == {1, 3}


def test_only_clean_trial_episodes_count_and_a_human_step_there_is_a_failure() -> None:
    gate = DeploymentGate(GateConfig(enabled=True, trial_episodes=3))
    gate.published(1)
    gate.observe(episode(0, 1, True, switch=3), True)  # swapped mid-episode
    gate.observe(episode(1, 7, True), True)  # a version not on trial
    assert gate.counts(1) == (0, 0) and gate.since == 2
    gate.observe(episode(2, 1, True, human=True), True)  # the task succeeded, with a person's help
    gate.observe(episode(3, 1, True), True)
    assert gate.counts(1) == (1, 2)


def test_the_run_ending_mid_trial_refuses_the_candidate_and_the_state_survives_a_restart() -> None:
    cfg = GateConfig(enabled=True, trial_episodes=5, start_episodes=5, gap_episodes=0, retry_until=0)
    gate = DeploymentGate(cfg)
    started(gate, [True] * 5)
    gate.published(3)
    feed(gate, 3, [True] * 3, start=10)
    again = DeploymentGate.restore(cfg, json.loads(json.dumps(gate.state())))
    assert again.state() == gate.state() and again.candidate == 3
    d = again.decide(finish=True)
    assert d is not None and not d.kept and "ended" in d.reason and again.incumbent == 1 and d.back_to == 1


def test_actors_run_a_trial_version_hands_off(tmp_path: Path) -> None:
    for version, state in ((1, "trial"), (2, "deployed")):
        (tmp_path / f"v{version}").mkdir()
        (tmp_path / f"v{version}" / "policy.json").write_text(json.dumps({"version": version, "gate": state}))
    assert on_trial(tmp_path, "policy.json", 1, gated=True) and not on_trial(tmp_path, "policy.json", 2, gated=True)
    assert on_trial(tmp_path, "policy.json", 0, gated=True)  # an unpublished start (DSRL's base) is its trial
    assert not on_trial(tmp_path, "policy.json", 9, gated=True)  # pruned: act as usual
    assert not on_trial(tmp_path, "policy.json", 1, gated=False)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="trial_episodes"):
        GateConfig(trial_episodes=0)
    with pytest.raises(ValueError, match="retry_until"):
        GateConfig(retry_until=-1)
    with pytest.raises(ValueError, match="confidence"):
        GateConfig(confidence=1.0)
    assert abs(GateConfig(confidence=0.95).z - 1.96) < 1e-3


# ------------------------------------------------------------------------------------------ the learner's side
def gated_learner(tmp: Path, monkeypatch: pytest.MonkeyPatch, trial: int = 4, retry: int = 0) -> OnlineLearner:
    """A DSRL learner on the toy base whose task succeeds when ``pos[0] > 0.5`` (the rule patched in)."""
    import robot_rl.learners.learner_process as lp

    monkeypatch.setattr(lp, "observed_success", lambda env_id: lambda obs: float(obs["pos"][0]) > 0.5)
    toy_base().save(tmp / "policy")
    cfg = load_config(OnlineConfig, None, [
        f"policy={tmp / 'policy'}", "learner.algorithm=dsrl", "learner.device=cpu", "learner.dsrl.warmup_steps=10",
        "learner.dsrl.batch_size=16", "learner.dsrl.latent.hidden=32", "learner.gate.enabled=true",
        f"learner.gate.trial_episodes={trial}", f"learner.gate.start_episodes={trial}", "learner.gate.gap_episodes=2",
        f"learner.gate.retry_until={retry}"])
    return OnlineLearner(cfg, tmp / "run")


def play(learner: OnlineLearner, version: int, outcomes: list[bool], start: int) -> list[dict]:
    """Episodes of ``version`` into the learner; the gate lines they brought into its log."""
    log = learner.run_dir / "learner_log.jsonl"
    before = log.read_text().count("\n") if log.exists() else 0
    for i, ok in enumerate(outcomes):
        learner.add(episode(start + i, version, ok))
    lines = [json.loads(x) for x in log.read_text().splitlines()[before:]] if log.exists() else []
    return [x for x in lines if "gate" in x]


def test_the_learner_runs_trials_and_deploys_the_kept_weights_again_between_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = gated_learner(tmp_path, monkeypatch)
    weights = tmp_path / "run" / "weights"
    learner.add(interleaved(np.random.default_rng(0)))  # past DSRL's warm-up (their versions are -1: not counted)
    learner.train(learner.train_allowed())
    assert learner.publish() == 0  # the start (version 0: the base's own noise) is on trial: nothing goes out
    (line,) = play(learner, 0, [True] * 3 + [False], start=1000)
    # the start is kept and deployed as v1: the base's own noise again, now with the human (not a trial)
    assert line["gate"] == "kept" and line["published"] == 1 and line["back_to"] == 0
    v1 = NoiseActorWeights.load(weights / "v1")
    assert v1.actor is None and v1.meta["gate"] == "deployed"
    agent = DSRLAgent(toy_base(), weights_dir=weights)
    agent.poll_weights()
    assert agent.version == 1 and agent._noise({"pos": np.zeros((2, 2), np.float32)}) is None
    assert not on_trial(weights, MARKER, 1, gated=True)
    learner.train(2)
    assert learner.publish() == 1  # held back until the deployed version has acted its gap (2 episodes)
    play(learner, 1, [False, False], start=1500)
    assert learner.publish() == 2 and on_trial(weights, MARKER, 2, gated=True)  # the newest weights on trial
    learner.train(2)
    assert learner.publish() == 2  # nothing else while v2 is on trial
    (line,) = play(learner, 2, [False] * 3, start=2000)  # 1/4 at best: its upper end 0.70 < 0.75
    assert line["gate"] == "refused" and line["candidate"] == 2 and line["published"] == 3 and line["back_to"] == 0
    play(learner, 3, [True, True], start=2500)
    learner.train(2)
    assert learner.publish() == 4
    (line,) = play(learner, 4, [True] * 4, start=3000)
    assert line["gate"] == "kept" and line["published"] == 5 and learner.gate is not None and learner.gate.deployed == 4
    kept = load_file(str(tmp_path / "run" / "deployed" / "v4" / WEIGHTS))
    again = load_file(str(weights / "v5" / WEIGHTS))  # v4's weights, deployed as v5
    assert all(np.array_equal(again[k].numpy(), kept[k].numpy()) for k in kept)
    assert json.loads((weights / "v5" / MARKER).read_text())["version"] == 5 and not on_trial(weights, MARKER, 5, True)
    # a restarted learner knows what is deployed, that v5 carries v4's weights, and how much of the gap is left
    play(learner, 5, [True], start=3500)
    learner.checkpoint()
    restarted = gated_learner(tmp_path, monkeypatch)
    assert restarted.gate is not None and restarted.gate.deployed == 4
    assert restarted.gate.gate.identity[5] == 4 and restarted.gate.gate.since == 1
    play(restarted, 5, [True], start=3600)
    restarted.train(2)
    assert restarted.publish() == 6
    play(restarted, 6, [True], start=4000)
    decision = restarted.gate.finish()  # the run ends mid-trial: refused, v4's weights go out last
    assert decision is not None and not decision.kept
    newest = list_versions(weights, MARKER)[-1]
    assert newest[0] == 7 and load_file(str(newest[1] / WEIGHTS)).keys() == kept.keys()


def test_an_algorithm_that_acts_before_its_first_version_cannot_be_gated(tmp_path: Path) -> None:
    class Warming:
        def can_publish(self) -> bool:
            return False

    with pytest.raises(ValueError, match="hg_dagger and dsrl"):
        GatedPublisher(GateConfig(enabled=True), tmp_path, WeightsPublisher(tmp_path / "w"), Warming(), lambda e: True)


def test_the_learner_puts_a_kept_version_on_trial_again_and_deploys_the_best_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = gated_learner(tmp_path, monkeypatch, retry=12)
    weights = tmp_path / "run" / "weights"
    learner.add(interleaved(np.random.default_rng(0)))
    learner.train(learner.train_allowed())
    assert learner.publish() == 0
    play(learner, 0, [True] * 3 + [False], start=1000)  # the start 3/4, deployed as v1
    play(learner, 1, [True, True], start=1500)
    learner.train(2)
    assert learner.publish() == 2
    (line,) = play(learner, 2, [True] * 4, start=2000)  # 4/4: kept and deployed (its lower bound is higher)
    assert line["gate"] == "kept" and line["back_to"] == 2 and line["published"] == 3
    play(learner, 3, [True, True], start=2500)
    learner.train(2)
    assert learner.publish() == 4  # v2's turn to be tried again, before the learner's newest
    assert on_trial(weights, MARKER, 4, gated=True) and learner.gate is not None
    assert learner.gate.gate.identity[4] == 2 and learner.gate.gate.retrial
    last = json.loads((tmp_path / "run" / "learner_log.jsonl").read_text().splitlines()[-1])
    assert last["version"] == 4 and last["retrial_of"] == 2 and last["steps"] == learner.steps.total_added
    tried = load_file(str(weights / "v4" / WEIGHTS))
    kept = load_file(str(tmp_path / "run" / "deployed" / "v2" / WEIGHTS))
    assert all(np.array_equal(tried[k].numpy(), kept[k].numpy()) for k in kept)
    (line,) = play(learner, 4, [False] * 4, start=3000)  # found out: 4/8 in all
    assert line["gate"] == "retried" and line["successes"] == 4 and line["episodes"] == 8
    assert line["back_to"] == 0 and line["published"] == 5  # the start (3/4) is the best again: the base goes out
    assert NoiseActorWeights.load(weights / "v5").actor is None and not on_trial(weights, MARKER, 5, gated=True)
    play(learner, 5, [True, True], start=3500)
    learner.train(2)
    assert learner.publish() == 6 and learner.gate.gate.identity[6] == 6  # the newest now, not another retrial


def test_an_episode_whose_observations_do_not_show_the_task_is_judged_by_its_success_event() -> None:
    from dataclasses import replace

    from robot_rl.learners.task_success import episode_succeeded, pick_lift_success
    from robot_rl.sim.envs.arm_pick_lift import lift_success

    def cube(z: float) -> dict[str, np.ndarray]:  # a simulator's observation: the cube at height z
        return {"pos": np.zeros(2, np.float32), "object_pos": np.array([0.5, 0.0, z], np.float32)}

    up, down = cube(0.3), cube(0.0)
    assert lift_success(up["object_pos"]) and not lift_success(down["object_pos"])
    sim = [replace(t, observation=down, next_observation=down) for t in episode(0, 1, False)]
    assert not episode_succeeded(pick_lift_success, sim)
    assert episode_succeeded(pick_lift_success, [*sim[:-1], replace(sim[-1], next_observation=up)])
    assert not episode_succeeded(pick_lift_success, [*sim[:-1], replace(sim[-1], terminated=True, reward=1.0)])
    graph = episode(1, 1, False)  # a graph policy's observation has no object: the success event decides
    assert not episode_succeeded(pick_lift_success, graph)
    assert episode_succeeded(pick_lift_success, [*graph[:-1], replace(graph[-1], terminated=True, reward=1.0)])
