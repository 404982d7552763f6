"""DSRL in the online runner: decisions gathered from interleaved step streams, a frozen base, warm-up on the
base's own noise, failure keeps the last good version, refused versions, resume, and a run through the
process runner whose noise actors the actor swaps in."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from robot_rl.core.config import load_config
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.algorithms.dsrl_online import (
    MARKER,
    DSRLAgent,
    DSRLAlgorithm,
    DSRLRunConfig,
    NoiseActorWeights,
    steered_executor,
)
from robot_rl.learners.dsrl import DSRLConfig, decisions_from_steps
from robot_rl.learners.learner_process import OnlineLearner
from robot_rl.learners.online import run_online
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.policies.base import Policy, PolicySpec
from robot_rl.policies.flow import FlowConfig, FlowPolicy
from robot_rl.runtime.episode import to_observation
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.runtime.weights import WeightsPublisher, list_versions
from robot_rl.sim.experts import expert_for

H, A, TO, N = 4, 2, 2, 2
"""Chunk length, action size, observation history and executed steps per chunk of the toy base."""
SMALL = {"hidden": 32, "device": "cpu"}


@pytest.fixture(autouse=True)
def one_thread() -> None:
    """One torch thread, as the runner's processes use (small networks; several threads only contend)."""
    torch.set_num_threads(1)


def toy_base(seed: int = 0) -> FlowPolicy:
    """An untrained flow policy on a 2-D state (what it does does not matter here, only that it is frozen)."""
    torch.manual_seed(seed)
    policy = FlowPolicy(load_config(FlowConfig, {"horizon": H, "n_obs_steps": TO, "unet_channels": [8, 16],
                                                 "num_inference_steps": 2, "executor": {"n_action_steps": N}}),
                        PolicySpec({"pos": 2}, {}, A))
    policy.set_stats({"pos": {"min": -np.ones(2), "max": np.ones(2)},
                      "action": {"min": -np.ones(A), "max": np.ones(A)}})
    return policy.eval()


def episode(ep: int, length: int, rng: np.random.Generator, human: tuple[int, int] = (-1, -1),
            terminal: bool = False) -> list[Transition]:
    """A random walk in "pos"; steps in [human[0], human[1]) are a human's; reward 1 once pos[0] > 0.5."""
    pos = rng.uniform(-1, 1, 2).astype(np.float32)
    out = []
    for k in range(length):
        action = rng.uniform(-1, 1, A).astype(np.float32)
        nxt = np.clip(pos + 0.1 * action, -1, 1).astype(np.float32)
        is_human = human[0] <= k < human[1]
        out.append(Transition({"pos": pos}, {"pos": nxt}, action, float(nxt[0] > 0.5),
                              terminal and k == length - 1, not terminal and k == length - 1, ep, k,
                              is_intervention=is_human, segment_source=SegmentSource.HUMAN if is_human
                              else SegmentSource.POLICY))
        pos = nxt
    return out


def interleaved(rng: np.random.Generator, n: int = 4, length: int = 15) -> list[Transition]:
    """``n`` episodes whose steps arrive interleaved, as from several actors."""
    eps = [episode(e, length + e, rng, human=(3, 7) if e % 2 else (-1, -1), terminal=e == 1) for e in range(n)]
    return [t for k in range(length + n) for ep in eps for t in ep[k:k + 1]]


def algorithm(tmp: Path, policy: Policy | None = None, **run: object) -> DSRLAlgorithm:
    cfg = load_config(DSRLRunConfig, {"warmup_steps": 10, "batch_size": 16, "latent": SMALL, **run})
    return DSRLAlgorithm(cfg, policy or toy_base(), tmp / "checkpoint", 10_000, 1.0, 10, device="cpu")


def test_decisions_gathered_from_the_buffer_are_those_of_decisions_from_steps(tmp_path: Path) -> None:
    steps = interleaved(np.random.default_rng(0))
    algo = algorithm(tmp_path)
    algo.add(steps)
    want = decisions_from_steps(steps, TO, N, stride=1)
    key = {a.tobytes(): i for i, a in enumerate(want["action"])}  # random actions: unique per decision
    idx = algo._idx("steps")
    rows = [r for p in range(len(algo.steps)) if (r := algo._rows(algo.steps, idx, p)) is not None]
    got = algo._gather(algo.steps, rows)
    assert len(rows) == len(want["reward"])  # every complete decision, none that is cut short
    for i in range(len(rows)):
        j = key[got["action"][i].tobytes()]
        for col in ("obs.pos", "next_obs.pos", "action", "reward", "terminated"):
            assert np.array_equal(got[col][i], want[col][j]), col
    assert len(algo.interventions) == 8
    batch = algo.batch()  # half of it starts at human steps (completed from the step buffer)
    assert batch["action"].shape == (16, N, A) and batch["obs.pos"].shape == (16, TO, 2)


def test_updates_leave_the_base_bit_identical_and_train_no_base_parameter(tmp_path: Path) -> None:
    policy = toy_base()
    before = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    algo = algorithm(tmp_path, policy)
    algo.add(interleaved(np.random.default_rng(1)))
    assert algo.train_allowed() > 0
    algo.update(20)
    assert algo.failure is None and algo.updates == 20 and algo.can_publish()
    after = policy.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    base = {id(p) for p in policy.parameters()}
    assert not base & {id(p) for p in algo.parameters()}
    with torch.no_grad():  # anything that does touch the base stops publishing
        next(policy.parameters()).add_(1e-3)
    assert not algo.can_publish() and "base policy" in str(algo.failure)


def observations(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"pos": rng.uniform(-1, 1, 2).astype(np.float32)} for _ in range(n)]


def test_at_warm_up_the_agent_runs_the_base_on_its_own_noise(tmp_path: Path) -> None:
    """No version yet: each chunk is the base's own sample with the same seeded generator, and its first
    ``action_steps`` actions are executed exactly."""
    agent = DSRLAgent(toy_base(), weights_dir=tmp_path / "weights", seed=0)
    twin_policy = toy_base()
    twin_policy.set_executor(steered_executor(twin_policy, None))
    twin = PolicyRunner(twin_policy)
    agent.reset(seed=5)
    twin.reset(seed=5)
    gen = torch.Generator().manual_seed(5)
    history: list[dict[str, np.ndarray]] = []
    for k, obs in enumerate(observations(8)):
        history = [*history[1:], obs] if k else [obs] * TO
        action = agent.act(obs)
        assert agent.version == 0 and agent.last_noise is None
        assert np.array_equal(action, twin.act(obs))
        if k % N == 0:  # a new chunk: the base's own draw from the same generator
            chunk = twin_policy.predict_chunk({"pos": np.stack([h["pos"] for h in history])}, generator=gen)
        assert np.allclose(action, chunk[k % N], atol=1e-6)


def publish_trained(algo: DSRLAlgorithm, folder: Path) -> int:
    algo.add(interleaved(np.random.default_rng(2)))
    algo.update(10)
    return WeightsPublisher(folder, marker=MARKER).publish(algo.publish)


def test_the_agent_swaps_published_noise_actors_between_chunks_and_refuses_broken_or_foreign_ones(
        tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    assert publish_trained(algorithm(tmp_path), weights) == 1
    agent = DSRLAgent(toy_base(), weights_dir=weights, seed=0)
    base = DSRLAgent(toy_base(), seed=0)
    agent.reset(seed=1)
    base.reset(seed=1)
    obs = observations(6, seed=3)
    acted = [agent.act(o) for o in obs]
    assert agent.version == 1 and agent.last_noise is not None and np.abs(agent.last_noise).max() <= 1.5
    assert not np.allclose(np.stack(acted), np.stack([base.act(o) for o in obs]))
    # v2: corrupt weights; v3: trained on another base -> both refused, v1 keeps acting
    assert publish_trained(algorithm(tmp_path / "other"), weights) == 2
    (weights / "v2" / "noise_actor.safetensors").write_bytes(b"garbage")
    for o in obs:
        agent.act(o)
    assert publish_trained(algorithm(tmp_path / "other", toy_base(seed=1)), weights) == 3
    for o in obs:
        agent.act(o)
    assert agent.version == 1 and set(agent.refused) == {2, 3}
    assert "does not fit this base" in agent.refused[3]
    assert NoiseActorWeights.load(weights / "v1").version == 1


def online_config(policy: Path, *overrides: str) -> OnlineConfig:
    return load_config(OnlineConfig, None, [
        f"policy={policy}", "learner.algorithm=dsrl", "learner.device=cpu", "learner.dsrl.warmup_steps=10",
        "learner.dsrl.batch_size=16", "learner.dsrl.latent.hidden=32", *overrides])


@pytest.mark.parametrize("poison", ["reward", "obs.pos", "weight"])
def test_a_non_finite_batch_or_weight_keeps_the_last_good_version(tmp_path: Path, poison: str) -> None:
    toy_base().save(tmp_path / "policy")
    learner = OnlineLearner(online_config(tmp_path / "policy"), tmp_path / "run")
    learner.add(interleaved(np.random.default_rng(0)))
    learner.train(learner.train_allowed())
    assert learner.publish() == 1
    learner.checkpoint()
    algo = learner.algorithm
    assert isinstance(algo, DSRLAlgorithm)
    if poison == "weight":
        with torch.no_grad():
            next(algo.dsrl.q_noise.parameters())[0] = float("nan")
    else:
        algo.steps.columns[poison][:] = np.nan
    learner.train(3)
    assert algo.failure is not None
    assert learner.train_allowed() == 0 and learner.publish() == 1
    learner.checkpoint()  # the last good networks stay on disk
    assert [v for v, _ in list_versions(tmp_path / "run" / "weights", MARKER)] == [1]
    log = [json.loads(line) for line in (tmp_path / "run" / "learner_log.jsonl").read_text().splitlines()]
    assert "error" in log[-1] and "v1" in log[-1]["error"]
    # the publish line carries the means of the algorithm's metrics (what a user watches for divergence)
    assert {"q_mean", "alpha", "entropy", "noise_rms"} <= set(log[0]["metrics"])
    assert all(np.isfinite(v) for v in log[0]["metrics"].values())
    resumed = OnlineLearner(online_config(tmp_path / "policy"), tmp_path / "run").algorithm
    assert isinstance(resumed, DSRLAlgorithm) and resumed.failure is None
    assert all(bool(torch.isfinite(p).all()) for p in resumed.parameters())


def test_a_restarted_learner_resumes_buffers_networks_and_counters(tmp_path: Path) -> None:
    algo = algorithm(tmp_path)
    demos = [t.replace(episode_id=1000, is_intervention=True, segment_source=SegmentSource.HUMAN)
             for t in episode(0, 12, np.random.default_rng(9))]
    algo.add_demonstrations(demos)
    steps = interleaved(np.random.default_rng(4))
    algo.add(steps)
    algo.update(5)
    algo.checkpoint()
    human = sum(t.is_intervention for t in steps)
    assert human > 0 and algo.counters()["human_steps"] == human  # the demonstrations are not the human's
    assert algo.interventions.total_added == human + len(demos)
    again = algorithm(tmp_path)
    assert again.resumed_from == {"steps": algo.steps.total_added, "human_steps": human, "updates": 5}
    assert all(torch.equal(a, b) for a, b in zip(algo.parameters(), again.parameters(), strict=True))
    assert again.train_allowed() > 0
    again.update(2)
    assert again.updates == 7 and again.failure is None


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="demo_fraction"):
        load_config(DSRLRunConfig, {"demo_fraction": 1.5})
    with pytest.raises(ValueError, match="noise_scale"):
        load_config(DSRLRunConfig, {"latent": {"noise_scale": 0.0}})
    assert load_config(DSRLRunConfig, {}).latent == DSRLConfig()
    shipped = load_config(OnlineConfig, str(Path(__file__).parents[1] / "config/learners/online_pick_lift_dsrl.yaml"))
    assert shipped.learner.algorithm == "dsrl" and shipped.learner.dsrl.end_on_success


# ------------------------------------------------------------------------------------------ process runner
@pytest.mark.slow
def test_the_process_runner_drives_dsrl_on_pick_lift(tmp_path: Path) -> None:
    """``learner.algorithm: dsrl`` through run_online: noise actors are published, the actor swaps them in
    during its run, and the steered chunks differ from the base's."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from helpers.tiny_policy import train_tiny_policy

    env_id = "robot_rl/ArmPickLift-v0"
    keys = ["joint_pos", "gripper_width", "tcp_pos", "object_pos", "goal_pos"]
    train_tiny_policy(env_id, expert_for(gym.make(env_id)), keys, steps=80, updates=20).save(tmp_path / "policy")
    # 24 short episodes (~0.4 s each here): the actor sends through a background thread and does not wait for
    # the learner, so a slow machine's learner could publish nothing before the run ended; paced
    # (learner.max_update_lag) the actors wait while the learner owes more than 4 updates.
    cfg = online_config(tmp_path / "policy", "actor.episodes=24", "learner.dsrl.warmup_steps=80",
                        "learner.publish_every=2", "learner.updates_per_cycle=2", "learner.update_to_data=0.05",
                        "learner.max_update_lag=4", "learner.checkpoint_every_s=2", "actor.human.max_takeovers=0")
    result = run_online(cfg, tmp_path / "run", progress=False, timeout=300)
    run = tmp_path / "run"
    assert len(result.episodes) == 24 and result.episodes[0]["version_start"] == 0
    versions = list_versions(run / "weights", MARKER)
    assert versions and versions[-1][0] >= 2
    assert max(e["version_end"] for e in result.episodes) >= 1  # the actor swapped a noise actor in
    steered = DSRLAgent(Policy.load(tmp_path / "policy"), deterministic=True,
                        noise_actor=NoiseActorWeights.load(versions[-1][1]))
    base = DSRLAgent(Policy.load(tmp_path / "policy"))
    env = gym.make(env_id)
    obs, _ = env.reset(seed=7)
    obs = to_observation(obs)
    steered.reset(seed=7)
    base.reset(seed=7)
    assert not np.allclose(steered.act(obs), base.act(obs))
    assert steered.last_noise is not None and base.last_noise is None
