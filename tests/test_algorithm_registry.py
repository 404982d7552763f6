"""A new online algorithm, defined in this file only, runs through every runner without a change to robot_rl.

``toy`` is a trivial algorithm: its learner counts the steps it receives (one "update" per step) and publishes,
as version ``v``, a tiny policy that outputs ``step * v`` in every action dimension (``learner.sections.toy``
holds ``step``); its agent acts from the newest published version; on a ROS graph it adds that value to the
node's policy action. It registers with :func:`robot_rl.learners.algorithms.registry.register`; the learner and actor
processes (the process runner, Ray actors, the ROS nodes) import this file through ``learner.algorithm_module``.

Checked for real: the steps the actors produce all arrive at the learner, versions are published, actors swap
them in (their episodes end on later versions), and every step the policy acted in carries exactly the action
of the version it names.

Module level stays importable outside pytest (other processes import this file): the ROS and Ray imports and
the test helpers are imported inside the tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from robot_rl.core.transition import Transition
from robot_rl.learners.algorithms import registry
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.runtime.weights import WeightsFollower

MARKER = "toy.json"
ENV = "robot_rl/ArmReach-v0"


@dataclass
class ToyConfig:
    """``learner.sections.toy``."""

    step: float = 0.01
    """Version ``v`` acts ``step * v`` in every dimension."""


class ToyLearner:
    """The learner side: every received step is one update; the published policy is a constant."""

    marker = MARKER

    def __init__(self, cfg: Any, checkpoint: Path) -> None:
        self.cfg: ToyConfig = ALGORITHM.section(cfg.learner)
        self.per_cycle, self.ckpt = cfg.learner.updates_per_cycle, checkpoint
        self.steps = ReplayBuffer(cfg.learner.capacity)
        self.interventions = ReplayBuffer(cfg.learner.capacity)
        self.updates = 0
        self.resumed_from: dict[str, int] | None = None
        self.failure: str | None = None

    @property
    def human_steps(self) -> int:
        return self.interventions.total_added

    def add(self, transitions: Sequence[Transition]) -> None:
        if transitions:
            self.steps.extend(transitions)
            human = [t for t in transitions if t.is_intervention]
            if human:
                self.interventions.extend(human)

    def held(self) -> list[Transition]:
        return []

    def updates_owed(self) -> int:
        return max(0, self.steps.total_added - self.updates)

    def train_allowed(self) -> int:
        return min(self.per_cycle, self.updates_owed())

    def update(self, n: int) -> dict[str, float]:
        self.updates += n
        return {"loss": 0.0, "seen": float(self.steps.total_added)}

    def can_publish(self) -> bool:
        return True

    def publish(self, folder: Path, version: int) -> None:
        (folder / MARKER).write_text(json.dumps({"version": version, "value": self.cfg.step * version,
                                                 "steps": self.steps.total_added}))

    def checkpoint(self) -> None:
        self.steps.save(self.ckpt / "steps")
        self.interventions.save(self.ckpt / "interventions")


def _load(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / MARKER).read_text()))


class ToyAgent:
    """Acts ``value`` of the newest published version of ``weights`` (0 before the first)."""

    def __init__(self, weights: Path | None, dim: int, published: dict[str, Any] | None = None) -> None:
        self.follower = None if weights is None else WeightsFollower(weights, MARKER, _load)
        self.dim = dim
        self.version, self.value = (0, 0.0) if published is None else (published["version"], published["value"])

    def poll(self) -> None:
        found = None if self.follower is None else self.follower.poll()
        if found is not None:
            self.version, self.value = int(found["version"]), float(found["value"])

    def act(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        self.poll()
        return np.full(self.dim, self.value, np.float32)


class ToyOnGraph:
    """On a ROS graph: the node's policy action plus the published value, swapped between steps."""

    def __init__(self, cfg: Any, weights: Path, on_swap: Callable[[int], None] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.agent = ToyAgent(weights, 0)
        self.on_swap = on_swap

    @property
    def version(self) -> int:
        return self.agent.version

    def act(self, obs: Mapping[str, np.ndarray], action: np.ndarray) -> np.ndarray:
        before = self.version
        self.agent.poll()
        if self.version != before and self.on_swap is not None:
            self.on_swap(self.version)
        return np.asarray(action, np.float32) + np.float32(self.agent.value)


def _dim(env: Any) -> int:
    return int(np.prod(env.action_space.shape))


ALGORITHM = registry.register(registry.OnlineAlgorithm(
    name="toy", config=ToyConfig, make_learner=ToyLearner,
    make_agent=lambda cfg, env, run: (env, ToyAgent(run / "weights", _dim(env)), None),
    evaluation_agent=lambda cfg, folder, env: ToyAgent(None, _dim(env), _load(folder)),
    marker=MARKER, streams=True, graph_agent=ToyOnGraph, needs_policy=lambda cfg: False, module=__name__))


# ------------------------------------------------------------------------------------------ checks
def _config(*overrides: str) -> Any:
    from robot_rl.core.config import load_config
    from robot_rl.learners.online_config import OnlineConfig

    return load_config(OnlineConfig, None, [
        "learner.algorithm=toy", "learner.sections={toy: {step: 0.02}}", f"actor.env_id={ENV}",
        "actor.human_risk=action", "actor.human.max_takeovers=1", "actor.episodes=3", "actors=2",
        "learner.publish_every=10", "learner.updates_per_cycle=5", "learner.checkpoint_every_s=1",
        "learner.device=cpu", *overrides])


def _check_run(run: Path, episodes: list[dict[str, Any]], step: float = 0.02) -> None:
    """Every produced step reached the learner once; versions were published and acted with as published."""
    stored = ReplayBuffer.load(run / "checkpoint" / "steps")
    assert stored.total_added == sum(e["steps"] for e in episodes) > 0  # every step arrived at the learner
    log = [json.loads(line) for line in (run / "learner_log.jsonl").read_text().splitlines()]
    assert [line["version"] for line in log] == list(range(1, len(log) + 1)) and len(log) >= 3
    newest = _load(run / "weights" / f"v{log[-1]['version']}")
    assert newest["value"] == pytest.approx(step * log[-1]["version"])
    assert max(e["version_end"] for e in episodes) >= 2  # the actors swapped published versions in
    acted = [t for t in stored.transitions() if not t.is_intervention and t.policy_version >= 1]
    assert len({t.policy_version for t in acted}) >= 2
    for t in acted:  # the version a step names is the one that acted
        np.testing.assert_allclose(t.action, step * t.policy_version, rtol=0, atol=1e-6)


def test_registry_lists_builtins_and_a_plug_in() -> None:
    assert registry.names()[:4] == ("hg_dagger", "residual", "rlpd", "dsrl")
    assert registry.get("toy") is ALGORITHM and "toy" in registry.names()
    cfg = _config()
    assert cfg.learner.algorithm_module == f"{__name__}@{Path(__file__).resolve()}"
    assert ALGORITHM.section(cfg.learner) == ToyConfig(step=0.02)
    with pytest.raises(ValueError, match=r"must be one of .*toy"):
        _config("learner.algorithm=nope")
    from robot_rl.learners.graph_actor import check_streamable, streamable

    assert check_streamable(cfg, "cartesian_delta", []) == [] and "toy" in streamable()


@pytest.mark.slow
def test_a_plug_in_runs_in_the_process_runner(tmp_path: Path) -> None:
    from robot_rl.learners.online import run_online

    result = run_online(_config(), tmp_path / "run", progress=False, timeout=600)
    assert len(result.episodes) == 6
    _check_run(tmp_path / "run", result.episodes)


@pytest.mark.slow
@pytest.mark.ray
def test_a_plug_in_runs_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from robot_rl.learners.ray_fleet import run_on_ray

    cfg = _config("fleet.learner_resources={num_cpus: 0.5}", "fleet.actor_resources={num_cpus: 0.5}")
    result = run_on_ray(cfg, tmp_path / "run", progress=False, timeout=600)
    assert len(result.episodes) == 6
    _check_run(tmp_path / "run", result.episodes)


@pytest.mark.ros
@pytest.mark.slow
def test_a_plug_in_streams_from_the_ros_policy_node(tmp_path: Path) -> None:
    rclpy = pytest.importorskip("rclpy")
    from helpers.online_graph import online_graph
    from helpers.ros_spin import spin_until
    from std_msgs.msg import Float64MultiArray, Int64, String
    from test_ros_policy_node import _policy

    from robot_rl.ros.launch_processes import launch
    from robot_rl.ros.qos import LATCHED

    ckpt = _policy().save(tmp_path / "policy")
    config = {"learner": {"algorithm": "toy", "algorithm_module": ALGORITHM.source, "sections": {"toy": {"step": 0.01}},
                          "publish_every": 5, "updates_per_cycle": 5, "checkpoint_every_s": 1.0, "device": "cpu"}}
    description, run = online_graph(tmp_path, ckpt, config)
    status: list[dict[str, Any]] = []
    learner_versions: list[int] = []
    policy_versions: list[int] = []
    pairs: list[list[float]] = []
    with launch(description, tmp_path / "logs") as graph:
        rclpy.init()
        node = rclpy.create_node("toy_probe")
        try:
            node.create_subscription(String, "/learner/status", lambda m: status.append(json.loads(m.data)), 10)
            node.create_subscription(Int64, "/learner/version", lambda m: learner_versions.append(m.data), LATCHED)
            node.create_subscription(Int64, "/policy/version", lambda m: policy_versions.append(m.data), LATCHED)
            node.create_subscription(Float64MultiArray, "/policy/base_action", lambda m: pairs.append(list(m.data)), 50)

            def spin(seconds: float, until: Callable[[], bool]) -> bool:
                return bool(spin_until(node, seconds, until))

            assert spin(120, lambda: bool(status) and status[-1]["steps"] >= 20), graph.log("learner")
            assert spin(60, lambda: bool(learner_versions) and learner_versions[-1] >= 2), graph.log("learner")
            new = learner_versions[-1]
            assert spin(30, lambda: bool(policy_versions) and policy_versions[-1] >= new), graph.log("policy")
            at = status[-1]["steps"]
            assert spin(30, lambda: status[-1]["steps"] > at + 10), graph.log("learner")
        finally:
            node.destroy_node()
            rclpy.shutdown()
    assert pairs  # the node published its policy's action beside the executed one
    assert policy_versions == sorted(policy_versions)  # versions only move forward
    stored = ReplayBuffer.load(run / "checkpoint" / "steps").transitions()
    acted = [t for t in stored if t.policy_version >= 1 and not t.is_intervention]
    assert acted and all(t.base_action is not None for t in acted)
    for t in acted:  # executed = the node's policy action + the version's value (the step keeps it in [-1, 1])
        base = np.asarray(t.base_action)
        np.testing.assert_allclose(t.action, np.clip(base + 0.01 * t.policy_version, -1, 1), atol=1e-5)
