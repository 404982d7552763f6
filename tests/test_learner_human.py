"""The simulated human leaves a good trajectory alone, takes over a drifting one after its reaction delay."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

import robot_rl.sim  # noqa: F401 - registers the envs
from robot_rl.core.spaces import SpecError
from robot_rl.learners.simulated_human import SimulatedHuman, SimulatedHumanConfig
from robot_rl.sim.experts import expert_for

UP = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], np.float32)
"""A drifting policy: always moves up, away from the cube."""


@pytest.fixture(scope="module")
def env() -> gym.Env:
    e = gym.make("robot_rl/ArmPickLift-v0")
    yield e
    e.close()


def run(env: gym.Env, policy: Callable[[dict, int], np.ndarray], human: SimulatedHuman, seed: int = 0,
        steps: int = 80) -> tuple[list[bool], list[np.ndarray], bool]:
    obs, _ = env.reset(seed=seed)
    human.reset()
    flags, actions, success = [], [], False
    for t in range(steps):
        decision = human.step(obs, policy(obs, t))
        flags.append(decision.intervening)
        actions.append(decision.action)
        obs, _, term, trunc, info = env.step(decision.action)
        success = bool(info["is_success"])
        if term or trunc:
            break
    return flags, actions, success


def test_no_intervention_on_a_good_trajectory(env: gym.Env) -> None:
    policy_expert = expert_for(env)
    human = SimulatedHuman(expert_for(env), SimulatedHumanConfig(seed=1))
    flags, _, success = run(env, lambda o, t: policy_expert.act(o), human)
    assert success and not any(flags)


def test_takes_over_a_drifting_policy_after_its_reaction_delay_and_rescues_it(env: gym.Env) -> None:
    cfg = SimulatedHumanConfig(reaction_delay=3, smoothing=1.0, seed=2)
    expert = expert_for(env)
    # good for 10 steps, then drifts
    policy = lambda o, t: expert.act(o) if t < 10 else UP  # noqa: E731
    human = SimulatedHuman(expert_for(env), cfg)
    flags, _, success = run(env, policy, human)
    first = flags.index(True)
    assert first == 10 + cfg.reaction_delay  # noticed at step 10, reacted 3 steps later
    assert not any(flags[:first])
    assert success  # the human finished the task
    # the same seed gives the same human (noise included)
    flags2, actions2, _ = run(env, policy, SimulatedHuman(expert_for(env), cfg))
    _, actions1, _ = run(env, policy, SimulatedHuman(expert_for(env), cfg))
    assert flags2 == flags and all(np.array_equal(a, b) for a, b in zip(actions1, actions2))


def test_hands_back_control_when_the_policy_recovers(env: gym.Env) -> None:
    expert = expert_for(env)
    cfg = SimulatedHumanConfig(reaction_delay=0, min_takeover_steps=4, smoothing=1.0, action_noise=0.0)
    policy = lambda o, t: UP if 5 <= t < 8 else expert.act(o)  # noqa: E731
    flags, _, _ = run(env, policy, SimulatedHuman(expert_for(env), cfg), steps=20)
    assert flags[:5] == [False] * 5 and flags[5:9] == [True] * 4 and not any(flags[9:])


def test_nan_proposal_is_never_executed(env: gym.Env) -> None:
    obs, _ = env.reset(seed=0)
    human = SimulatedHuman(expert_for(env), SimulatedHumanConfig(reaction_delay=5))
    decision = human.step(obs, np.full(7, np.nan, np.float32))
    assert decision.intervening and np.all(np.isfinite(decision.action))
    with pytest.raises(SpecError, match="shape"):
        human.step(obs, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="release_threshold"):
        SimulatedHumanConfig(risk_threshold=0.1, release_threshold=0.2)


class ListSender:
    """Collects what an actor would send (the transport interface)."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    def send(self, transitions: list) -> None:
        self.batches.append(list(transitions))

    def close(self) -> None:
        pass


def test_run_episode_labels_segments_and_streams_during_the_episode(env: gym.Env) -> None:
    from robot_rl.core.transition import SegmentSource
    from robot_rl.fleet.transport import BatchingSender
    from robot_rl.learners.credit import assign_credit
    from robot_rl.runtime.episode import EpisodeHooks, run_episode

    expert = expert_for(env)
    steps = iter(range(1000))
    policy = lambda o: expert.act(o) if next(steps) < 10 else UP  # noqa: E731
    human = SimulatedHuman(expert_for(env), SimulatedHumanConfig(reaction_delay=2, smoothing=1.0, seed=3))
    sender = ListSender()
    stream = BatchingSender(sender, every=5)
    result = run_episode(env, policy, episode_id=7, human=human, seed=0, keep=True,
                         hooks=EpisodeHooks(on_transition=stream.add, policy_version=lambda: 4))
    stream.flush()
    ts = result.transitions
    assert result.success and result.takeovers == 1 and result.intervention_steps > 0
    assert [len(b) for b in sender.batches[:-1]] == [5] * (len(sender.batches) - 1)  # streamed, not per episode
    assert sum(len(b) for b in sender.batches) == len(ts)
    first = next(i for i, t in enumerate(ts) if t.is_intervention)
    assert first == 12 and ts[first].segment_id == 1 and ts[first - 1].segment_id == 0
    assert all(t.segment_source is SegmentSource.HUMAN for t in ts[first:] if t.segment_id == 1)
    assert all(t.policy_version == 4 and t.episode_id == 7 for t in ts)
    assert ts[first].policy_action is not None and not np.allclose(ts[first].policy_action, ts[first].action)
    credit = assign_credit(ts, result.success)
    assert credit.segments[0].outcome == -1.0  # the drifting policy segment is blamed, not the human's


def test_finishing_the_correction_hands_back_only_with_the_cube_held_and_up(env: gym.Env) -> None:
    """RaC-style: the policy drifts once early; the risk-only human hands back as soon as it agrees again, the
    finishing one keeps control through the grasp and hands back a held, lifted cube."""
    from robot_rl.learners.task_risk import pick_lift_secured

    expert = expert_for(env)
    policy = lambda o, t: UP if 5 <= t < 8 else expert.act(o)  # noqa: E731
    base = dict(reaction_delay=0, min_takeover_steps=4, smoothing=1.0, action_noise=0.0)
    quick, _, _ = run(env, policy, SimulatedHuman(expert_for(env), SimulatedHumanConfig(**base)), steps=80)
    human = SimulatedHuman(expert_for(env), SimulatedHumanConfig(**base, finish_correction=True),
                           secured=pick_lift_secured)
    obs, _ = env.reset(seed=0)
    human.reset()
    flags, handed_back = [], None
    for t in range(80):
        decision = human.step(obs, policy(obs, t))
        if flags and flags[-1] and not decision.intervening:
            handed_back = obs
        flags.append(decision.intervening)
        obs, _, term, trunc, _ = env.step(decision.action)
        if term or trunc:
            break
    assert sum(quick) == 4 and flags.index(True) == 5
    assert sum(flags) > 10 and handed_back is not None and pick_lift_secured(handed_back)
    assert not pick_lift_secured(env.reset(seed=0)[0])  # the cube on the table is not secured
    with pytest.raises(ValueError, match="secured"):
        SimulatedHuman(expert, SimulatedHumanConfig(finish_correction=True))
