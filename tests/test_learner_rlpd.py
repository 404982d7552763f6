"""RLPD and the shared off-policy machinery on arm pick-and-lift: demonstrations rewarded with the observed
success agree with the simulator, the demo buffer starts full, actors act at random until a version
exists and then follow it, HABC credit re-rewards finished episodes, the critic warm-up keeps the
actor still, and the process runner drives rlpd end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import robot_rl.sim  # noqa: F401
from robot_rl.core.config import load_config
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.env_info import dataset_info
from robot_rl.data.store import EpisodeStore
from robot_rl.learners.algorithms.residual import ResidualAlgorithm, ResidualConfig
from robot_rl.learners.algorithms.rlpd import RLPDAlgorithm, RLPDConfig
from robot_rl.learners.off_policy import OffPolicyConfig, TaskReward, demo_transitions
from robot_rl.learners.online import run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.sac_online import MARKER, ActorWeights, SACAgent
from robot_rl.learners.sac_rlpd import SACLearnerConfig
from robot_rl.learners.task_success import observed_success, pick_lift_success
from robot_rl.runtime.episode import run_episode
from robot_rl.runtime.weights import list_versions
from robot_rl.sim.experts import expert_for

PICK = "robot_rl/ArmPickLift-v0"
SMALL = SACLearnerConfig(hidden=32, num_critics=2, batch_size=32, utd_ratio=1, device="cpu")


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[Transition]], list[list[bool]]]:
    """Two scripted pick-lift episodes in a store, with the simulator's per-step success."""
    path = tmp_path_factory.mktemp("demos") / "pick.zarr"
    env = gym.make(PICK)
    episodes, successes = [], []
    with EpisodeStore.create(path, dataset_info(env, PICK)) as store:
        for seed in (3, 4):
            steps: list[bool] = []
            out = run_episode(env, expert_for(env), seed - 3, seed=seed, keep=True)
            expert = expert_for(env)  # the simulator's own verdict per step, replayed with the same seed
            obs, _ = env.reset(seed=seed)
            for _ in range(out.length):
                obs, _, _, _, info = env.step(expert.act(obs))
                steps.append(bool(info["is_success"]))
            store.add_episode(out.transitions, task="pick", success=out.success)
            episodes.append(out.transitions)
            successes.append(steps)
    env.close()
    return path, episodes, successes


def test_observed_success_agrees_with_the_simulator_on_recorded_episodes(demos: tuple) -> None:
    _, episodes, successes = demos
    for transitions, truth in zip(episodes, successes):
        seen = [pick_lift_success(t.next_observation) for t in transitions]
        assert seen == truth and any(truth) and not truth[0]
    with pytest.raises(ValueError, match="observed success"):
        observed_success("robot_rl/QuadHover-v0")


def test_rlpd_starts_with_the_demonstrations_in_its_demo_buffer_rewarded_by_success(demos: tuple,
                                                                                   tmp_path: Path) -> None:
    path, episodes, successes = demos
    loaded = demo_transitions(path, "success", pick_lift_success)
    assert len(loaded) == sum(len(e) for e in episodes)
    assert [t.reward for t in loaded] == [float(s) for steps in successes for s in steps]
    assert all(t.is_intervention and t.segment_source is SegmentSource.HUMAN for t in loaded)
    assert min(t.episode_id for t in loaded) >= 10**12  # never an actor's episode id
    algo = RLPDAlgorithm(RLPDConfig(warmup_steps=0, sac=SMALL), tmp_path, 10_000, 1.0, 10, device="cpu")
    algo.add_demonstrations(loaded)
    assert algo.interventions.total_added == len(loaded) and algo.steps.total_added == 0
    assert algo.train_allowed() == 0  # nothing received yet: the update-to-data budget is 0
    env = TaskReward(gym.make(PICK), "success")
    agent = SACAgent(None, tmp_path / "weights", action_dim=7, seed=1)
    out = run_episode(env, agent, 0, seed=11, keep=True, max_steps=10)
    actions = np.stack([t.action for t in out.transitions])
    assert agent.version == 0 and np.abs(actions).max() <= 1 and actions.std(0).min() > 0.2  # uniform random
    algo.add(out.transitions)
    n = algo.train_allowed()
    assert n == 10
    algo.update(n)
    assert algo.can_publish() and algo.failure is None
    folder = tmp_path / "weights" / "v1"
    folder.mkdir(parents=True)
    algo.publish(folder, 1)
    out = run_episode(env, agent, 1, seed=12, keep=True, max_steps=5)
    assert agent.version == 1 and not ActorWeights.load(folder).is_residual
    assert algo.sac is not None
    policy_actions = [algo.sac.act(dict(t.observation), deterministic=True) for t in out.transitions]
    assert all(np.all(np.isfinite(a)) and np.abs(a).max() <= 1 for a in policy_actions)


def test_a_residual_actor_is_refused_by_an_agent_without_a_base(tmp_path: Path) -> None:
    env = gym.make(PICK)
    out = run_episode(env, expert_for(env), 0, seed=1, base_agent=expert_for(env), keep=True, max_steps=5)
    algo = ResidualAlgorithm(ResidualConfig(base="expert", warmup_steps=0, sac=SMALL), tmp_path, 100, 1.0, 1,
                             device="cpu")
    algo.add(out.transitions)
    algo.update(1)
    (tmp_path / "weights" / "v1").mkdir(parents=True)
    algo.publish(tmp_path / "weights" / "v1", 1)
    agent = SACAgent(None, tmp_path / "weights", action_dim=7)
    agent.act(out.transitions[0].observation)
    assert agent.version == 0 and "residual" in agent.refused[1]


def _episode(sources: list[SegmentSource], success_at: int | None) -> list[Transition]:
    obs = {"x": np.zeros(2, np.float32)}
    out = []
    for i, src in enumerate(sources):
        human = src is SegmentSource.HUMAN
        seg = sum(1 for a, b in itertools.pairwise(sources[:i + 1]) if a is not b)
        out.append(Transition(observation=obs, next_observation=obs, action=np.zeros(2, np.float32),
                              reward=float(success_at is not None and i >= success_at), terminated=False,
                              truncated=i == len(sources) - 1, episode_id=5, step=i, is_intervention=human,
                              segment_source=src, segment_id=seg))
    return out


class _Counting(ResidualAlgorithm):
    """A residual algorithm that never builds networks: only the reward routing is under test."""

    def is_built(self) -> bool:
        return True

    def build(self, first: Transition) -> None:
        pass


@pytest.mark.parametrize("credit", ["none", "habc"])
def test_takeover_penalty_and_habc_credit_reward_what_the_policy_executed(credit: str, tmp_path: Path) -> None:
    P, H = SegmentSource.POLICY, SegmentSource.HUMAN
    steps = _episode([P, P, P, H, H, P, P, P], success_at=6)
    cfg = ResidualConfig(base="expert", intervention_penalty=0.5, credit=credit)
    algo = _Counting(cfg, tmp_path, 100, 1.0, 1, device="cpu")
    for k in range(0, len(steps), 3):  # streamed in pieces, as the actors send them
        algo.add(steps[k:k + 3])
        if credit == "habc" and k + 3 < len(steps):
            assert algo.steps.total_added == 0  # an episode is held until its last step
    rewards = [t.reward for t in algo.steps.transitions()]
    if credit == "none":
        assert rewards == [0, 0, -0.5, 0, 0, 0, 1, 1]  # per-step success, the step before the takeover penalised
    else:
        assert rewards == [0, 0, -0.5, 0, 0, 0, 0, 1]  # outcome on the policy segment's last step only
    assert algo.interventions.total_added == 2
    with pytest.raises(ValueError, match="habc"):
        OffPolicyConfig(credit="habc", reward="env")


def test_critic_warmup_keeps_the_actor_still_and_residual_critics_see_the_base(tmp_path: Path) -> None:
    env = gym.make(PICK)
    out = run_episode(env, expert_for(env), 0, seed=1, base_agent=expert_for(env), keep=True, max_steps=40)
    sac = SACLearnerConfig(hidden=32, num_critics=2, batch_size=32, utd_ratio=1, actor_delay=5, residual_penalty=1.0)
    algo = ResidualAlgorithm(ResidualConfig(base="expert", warmup_steps=0, sac=sac), tmp_path, 100, 1.0, 1,
                             device="cpu")
    algo.add(out.transitions)
    assert algo.sac is not None
    state_dim = sum(algo.sac.state_dims.values())
    assert algo.sac.critic.l1.weight.shape[1] == state_dim + 2 * 7  # state + base action + action
    before = [p.detach().clone() for p in algo.sac.actor.parameters()]
    algo.update(5)
    assert all(torch.equal(a, b) for a, b in zip(before, algo.sac.actor.parameters()))
    algo.update(1)
    assert not all(torch.equal(a, b) for a, b in zip(before, algo.sac.actor.parameters()))


@pytest.mark.slow
def test_rlpd_through_the_process_runner(demos: tuple, tmp_path: Path) -> None:
    path, _, _ = demos
    cfg = load_config(OnlineConfig, None, [
        f"actor.env_id={PICK}", "actor.episodes=30", "actor.human.max_takeovers=0", "learner.algorithm=rlpd",
        f"learner.demos={path}", "learner.rlpd.warmup_steps=0", "learner.rlpd.sac.hidden=32",
        "learner.rlpd.sac.num_critics=2", "learner.rlpd.sac.batch_size=32", "learner.rlpd.sac.utd_ratio=1",
        "learner.publish_every=20", "learner.device=cpu"])
    result = run_online(cfg, tmp_path / "run", progress=False, timeout=300)
    assert len(result.episodes) == 30 and result.learner and result.learner[-1]["steps"] == 30 * 80
    versions = list_versions(tmp_path / "run" / "weights", MARKER)
    assert versions and max(e["version_end"] for e in result.episodes) >= 1
    meta = json.loads((versions[-1][1] / MARKER).read_text())
    assert meta["scale"] == 0.0 and meta["updates"] > 0


def test_end_on_success_ends_actor_episodes_and_demonstrations_at_the_first_lift(demos: tuple) -> None:
    path, _, successes = demos
    env = TaskReward(gym.make(PICK), "success", end_on_success=True)
    out = run_episode(env, expert_for(env), 0, seed=3, keep=True)
    first = successes[0].index(True)
    assert out.length == first + 1 and out.success  # the scripted expert's first lift, as the simulator saw it
    last = out.transitions[-1]
    assert last.terminated and not last.truncated and last.reward == 1.0
    assert all(t.reward == 0.0 for t in out.transitions[:-1])
    cut = demo_transitions(path, "success", pick_lift_success, end_on_success=True)
    assert len(cut) == sum(s.index(True) + 1 for s in successes)
    assert sum(t.terminated for t in cut) == 2 and sum(t.reward for t in cut) == 2.0
    with pytest.raises(ValueError, match="success"):
        TaskReward(gym.make(PICK), "env", end_on_success=True)
