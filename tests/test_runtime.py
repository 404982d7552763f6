"""The runtime: one episode loop (evaluation, recording and actors agree), one labeller, one policy runner."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import robot_rl.sim  # noqa: F401  (registers the environments)
from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.data.recorder import record
from robot_rl.data.schema import DatasetInfo
from robot_rl.data.store import EpisodeStore
from robot_rl.fleet.transport import BatchingSender
from robot_rl.learners.simulated_human import SimulatedHuman, SimulatedHumanConfig
from robot_rl.learners.task_risk import task_risk
from robot_rl.policies import get_policy_class
from robot_rl.policies.base import Policy, PolicySpec
from robot_rl.runtime import EpisodeHooks, SegmentLabeller, run_episode
from robot_rl.runtime.policy_runner import PolicyRunner
from robot_rl.runtime.weights import WeightsPublisher
from robot_rl.sim.experts import expert_for
from robot_rl.training.evaluate import evaluate

ENV_ID = "robot_rl/ArmPickLift-v0"


class ListSender:
    """A TransitionSender that keeps what it was sent."""

    def __init__(self) -> None:
        self.batches: list[list[Transition]] = []

    def send(self, transitions: list[Transition]) -> None:
        self.batches.append(list(transitions))

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------- the episode loop
def test_evaluation_recording_and_actor_agree_on_one_scripted_episode(tmp_path: Path) -> None:
    """The same scripted episode (same seed) driven three ways: one success, one length, one intervention count."""
    seed = 3
    env = gym.make(ENV_ID)
    expert = expert_for(env)
    report = evaluate(expert, env, ENV_ID, episodes=1, seed=seed)

    store = EpisodeStore.create(tmp_path / "r.zarr", DatasetInfo(robot="panda", fps=10.0))
    recorded = record(env, expert_for(env), store, episodes=1, seed=seed, progress=False)
    stored = list(store.transitions(0))

    # the actor's configuration: a supervising human that watches the grasp, steps streamed in batches of 5
    human = SimulatedHuman(expert_for(env), SimulatedHumanConfig(seed=0), state_risk=task_risk(ENV_ID))
    sender = ListSender()
    stream = BatchingSender(sender, every=5)
    actor = run_episode(env, expert_for(env), episode_id=9, seed=seed, human=human,
                        hooks=EpisodeHooks(on_transition=stream.add, policy_version=lambda: 2))
    stream.flush()
    streamed = [t for batch in sender.batches for t in batch]

    assert report.successes == [True] and recorded.successes == [True] and actor.success is True
    assert report.lengths[0] == recorded.lengths[0] == actor.length == len(stored) == len(streamed)
    assert actor.intervention_steps == 0 and actor.takeovers == 0
    assert sum(t.is_intervention for t in stored) == 0 and sum(t.is_intervention for t in streamed) == 0
    np.testing.assert_allclose(np.stack([t.action for t in stored]), np.stack([t.action for t in streamed]),
                               atol=1e-6)  # the same actions were executed, step by step
    assert all(t.segment_source is SegmentSource.SCRIPTED for t in stored)
    assert all(t.policy_version == 2 and t.episode_id == 9 for t in streamed)
    env.close()


def test_success_at_any_step_and_unknown_when_nobody_says() -> None:
    class Env(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (1,))
        action_space = gym.spaces.Box(-1, 1, (1,))

        def __init__(self, report: bool) -> None:
            self.report, self.t = report, 0

        def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):  # type: ignore[no-untyped-def]
            self.t += 1
            info = {"is_success": self.t == 2} if self.report else {}
            return np.zeros(1, np.float32), 0.0, False, self.t >= 4, info

    zero = lambda obs: np.zeros(1)  # noqa: E731
    assert run_episode(Env(True), zero).success is True  # succeeded at step 2, not at the last step
    assert run_episode(Env(False), zero).success is None

    class Operator:
        outcome = False  # a person declared the take a failure

        def act(self, obs: object) -> np.ndarray:
            return np.zeros(1)

    assert run_episode(Env(True), Operator()).success is False
    cut = run_episode(Env(True), zero, max_steps=3, keep=True)
    assert cut.length == 3 and cut.transitions[-1].truncated and cut.truncation_reason == "cut"
    early = run_episode(Env(True), zero, steps_after_success=0, keep=True)  # same verdict, 2 steps instead of 4
    assert early.success is True and early.length == 2 and early.truncation_reason == "success"
    assert early.transitions[-1].truncated and not early.transitions[-1].terminated  # cut, not a task end
    assert run_episode(Env(True), zero, steps_after_success=1).length == 3  # one more step: settling
    assert run_episode(Env(False), zero, steps_after_success=0).length == 4  # nobody says: runs to the end


def test_labeller_opens_a_segment_at_every_change_of_hands() -> None:
    labels = SegmentLabeller()
    P, H = SegmentSource.POLICY, SegmentSource.HUMAN
    got = [labels.label(s) for s in (H, H, P, P, H, P)]
    assert got == [0, 0, 1, 1, 2, 3]
    assert labels.takeovers == 2 and labels.human_steps == 3
    labels.reset()
    assert labels.label(P) == 0 and labels.takeovers == 0


# ----------------------------------------------------------------------------------------- the policy runner
SPEC = PolicySpec(state_dims={"pos": 2}, image_shapes={}, action_dim=2)


def tiny_policy(offset: float = 0.0) -> Policy:
    klass = get_policy_class("flow")
    cfg = klass.config_cls(horizon=8, n_obs_steps=2, unet_channels=(16, 32))
    cfg.executor.n_action_steps = 4
    policy = klass(cfg, SPEC)
    policy.set_stats({"pos": {"min": -np.ones(2), "max": np.ones(2), "mean": np.zeros(2), "std": np.ones(2)},
                      "action": {"min": -np.ones(2), "max": np.ones(2), "mean": np.zeros(2), "std": np.ones(2)}})
    if offset:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(offset)
    return policy


def test_runner_swaps_published_weights_between_chunks_and_refuses_bad_ones(tmp_path: Path) -> None:
    policy = tiny_policy()
    publisher = WeightsPublisher(tmp_path / "weights")
    runner = PolicyRunner(policy, weights_dir=tmp_path / "weights")
    swaps: list[int] = []
    runner.on_swap = swaps.append
    runner.reset(seed=0)
    obs = {"pos": np.zeros(2, np.float32)}
    runner.act(obs)  # chunk 1
    publisher.publish_policy(tiny_policy(offset=0.5))  # v1 appears mid-chunk
    for _ in range(3):
        runner.act(obs)
    assert runner.version == 0 and swaps == []
    runner.act(obs)  # chunk 2: the new version acts from here on
    assert runner.version == 1 and swaps == [1]
    other = get_policy_class("flow")(get_policy_class("flow").config_cls(horizon=8, unet_channels=(16, 32)),
                                     PolicySpec(state_dims={"pos": 3}, image_shapes={}, action_dim=2))
    publisher.publish(lambda folder, version: other.save(folder))  # v2: a different spec, must be refused
    for _ in range(8):
        runner.act(obs)
    assert runner.version == 1 and 2 in runner.refused and "differs" in runner.refused[2]


def test_seeded_runner_repeats_its_actions() -> None:
    policy = tiny_policy()
    runner = PolicyRunner(policy)
    obs = [{"pos": np.array([0.1 * i, -0.1 * i], np.float32)} for i in range(6)]
    runner.reset(seed=5)
    first = [runner.act(o) for o in obs]
    runner.reset(seed=5)
    second = [runner.act(o) for o in obs]
    np.testing.assert_array_equal(np.stack(first), np.stack(second))
    runner.reset(seed=6)
    assert not np.allclose(np.stack(first), np.stack([runner.act(o) for o in obs]))


def test_threaded_runner_holds_until_the_first_chunk_then_streams() -> None:
    policy = tiny_policy()
    runner = PolicyRunner(policy, threaded=True)
    try:
        with pytest.raises(RuntimeError, match="threaded"):
            runner.act({"pos": np.zeros(2, np.float32)})
        obs = {"pos": np.zeros(2, np.float32)}
        first = runner.step(obs)
        assert first is None and runner.late_steps == 1  # the network has not answered yet: the caller holds
        deadline = time.monotonic() + 30.0
        while runner.chunks == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner.chunks == 1
        actions = [runner.step(obs) for _ in range(12)]
        deadline = time.monotonic() + 30.0
        while runner.chunks < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        actions += [runner.step(obs) for _ in range(12)]
        got = [a for a in actions if a is not None]
        assert len(got) >= 12 and all(a.shape == (2,) and np.all(np.isfinite(a)) for a in got)
        assert runner.chunks >= 2  # further chunks were requested and arrived without blocking step()
    finally:
        runner.close()


def test_runner_device_setting_moves_the_policy_and_keeps_cpu_results() -> None:
    from robot_rl.core.device import DeviceError

    obs = [{"pos": np.array([0.1 * i, -0.1 * i], np.float32)} for i in range(6)]
    policy = tiny_policy()
    plain = PolicyRunner(policy)
    plain.reset(seed=1)
    before = np.stack([plain.act(o) for o in obs])
    on_cpu = PolicyRunner(policy, device="cpu")
    on_cpu.reset(seed=1)
    assert on_cpu.policy.device.type == "cpu"
    np.testing.assert_array_equal(before, np.stack([on_cpu.act(o) for o in obs]))
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError):
            PolicyRunner(tiny_policy(), device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runner_on_cuda_acts_like_the_cpu_runner() -> None:
    obs = [{"pos": np.array([0.1 * i, -0.1 * i], np.float32)} for i in range(6)]
    policy = tiny_policy()
    cpu = PolicyRunner(policy, device="cpu")
    cpu.reset(seed=2)
    on_cpu = np.stack([cpu.act(o) for o in obs])
    gpu = PolicyRunner(policy, device="cuda")
    assert gpu.policy.device.type == "cuda"
    gpu.reset(seed=2)  # the noise is drawn on the CPU generator, so both see the same noise
    # in full float32: cuDNN's default TF32 convolutions put actions up to 2e-4 off on an H200
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        on_gpu = np.stack([gpu.act(o) for o in obs])
    np.testing.assert_allclose(on_cpu, on_gpu, atol=1e-4)


def test_evaluation_reports_the_task_metric_and_counts_crashes_apart() -> None:
    """The hover metric sees what success cannot: the stand-in's hidden mass makes the expert sag; a drone
    with its motors off crashes, counts as a failure and is left out of the metric."""
    from robot_rl.training.task_metrics import metric_for

    metric = metric_for("robot_rl/QuadHover-RealStandIn-v0")
    assert metric is not None and metric_for("robot_rl/ArmPickLift-v0") is None
    sag = {}
    for env_id in ("robot_rl/QuadHover-v0", "robot_rl/QuadHover-RealStandIn-v0"):
        env = gym.make(env_id)
        report = evaluate(expert_for(env), env, env_id, episodes=2, seed=0, metric=metric.fn)
        env.close()
        assert report.failures == [False, False] and len(report.metrics) == 2
        sag[env_id] = report.metric_mean
    assert sag["robot_rl/QuadHover-v0"] < 0.01 < 0.05 < sag["robot_rl/QuadHover-RealStandIn-v0"], sag

    class MotorsOff:
        def act(self, obs: dict) -> np.ndarray:
            return np.zeros(4, dtype=np.float32)

    env = gym.make("robot_rl/QuadHover-v0")
    report = evaluate(MotorsOff(), env, "robot_rl/QuadHover-v0", episodes=2, seed=0, metric=metric.fn)
    env.close()
    assert report.failures == [True, True] and report.failure_rate == 1.0
    assert np.isnan(report.metrics).all() and np.isnan(report.metric_mean)
    assert report.to_json()["failure_rate"] == 1.0


def test_each_episode_hands_the_envs_instruction_to_the_agent_and_the_runner_predicts_with_it() -> None:
    """A multi-task env draws its task at reset: the episode loop tells the agent, the runner conditions on it."""
    env = gym.make("robot_rl/ArmMultiTask-v0")
    heard: list[str] = []
    expert = expert_for(env)

    class Listening:
        def instruct(self, text: str) -> None:
            heard.append(text)

        def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
            return expert.act(obs)

    said = []
    for seed in range(6):
        run_episode(env, Listening(), seed=seed, max_steps=1)
        said.append(env.unwrapped.instruction)
    assert heard == said and len(set(said)) > 1  # one per episode, and the tasks differ between seeds

    policy = tiny_policy()
    runner = PolicyRunner(policy)
    seen: list[object] = []
    original = policy.predict_chunk

    def spy(*args: object, **kwargs: object) -> np.ndarray:
        seen.append(kwargs.get("task"))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    policy.predict_chunk = spy  # type: ignore[method-assign]
    runner.reset(seed=0)
    runner.act({"pos": np.zeros(2, np.float32)})
    runner.instruct("pick up the blue cube and lift it")
    runner.reset(seed=0)
    runner.act({"pos": np.zeros(2, np.float32)})
    assert seen == [None, "pick up the blue cube and lift it"]
    pinned = PolicyRunner(policy, instruction="reach the green ball")  # e.g. robot-rl eval --task
    pinned.instruct("pick up the blue cube and lift it")
    pinned.reset(seed=0)
    pinned.act({"pos": np.zeros(2, np.float32)})
    assert seen[-1] == "reach the green ball"
