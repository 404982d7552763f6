"""The actor side of a run on a ROS graph: which runs it acts in, and the residual on a given base action."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from robot_rl.core.config import save_config
from robot_rl.fleet.wire import CONFIG_FILE
from robot_rl.learners.algorithms.residual import ResidualActorWeights, ResidualConfig, StreamedResidual
from robot_rl.learners.graph_actor import check_streamable, read_run_config
from robot_rl.learners.online_config import OnlineConfig
from robot_rl.learners.sac_rlpd import GaussianActor
from robot_rl.runtime.step_stream import StepStream

OBS = {"joint_pos": np.linspace(-0.5, 0.5, 7).astype(np.float32), "tcp_pos": np.array([0.5, 0.0, 0.3], np.float32)}
BASE = np.array([0.2, -0.1, 0.0, 0.0, 0.0, 0.0, 0.95], np.float32)


def _publish(weights: Path, version: int, scale: float = 0.1, dims: dict[str, int] | None = None) -> None:
    dims = dims or {"joint_pos": 7, "tcp_pos": 3}
    torch.manual_seed(version)
    actor = GaussianActor(sum(dims.values()), 7, 16, scale)
    torch.nn.init.normal_(actor.head.weight, std=1.0)  # a trained residual: not the zero it starts at
    folder = weights / f"v{version}"
    folder.mkdir(parents=True)
    ResidualActorWeights.write(folder, actor, dims, 7, 16, version, {})


def test_the_residual_acts_on_the_given_base_and_swaps_between_steps(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    swaps: list[int] = []
    errors: list[str] = []
    agent = StreamedResidual(ResidualConfig(explore=False), weights, on_swap=swaps.append, on_error=errors.append)
    assert agent.version == 0 and np.array_equal(agent.act(OBS, BASE), BASE)  # no residual yet: the base exactly

    _publish(weights, 1)
    action = agent.act(OBS, BASE)
    assert swaps == [1] and agent.version == 1 and not errors
    assert np.all(np.abs(action - np.clip(BASE, -1, 1)) <= 0.1 + 1e-6) and not np.allclose(action, BASE)
    assert np.all(action <= 1.0)  # base + residual stays in the action range

    _publish(weights, 2, dims={"joint_pos": 7, "goal_pos": 3})  # reads a key this stream does not have
    assert np.array_equal(agent.act(OBS, BASE), action)  # refused: v1 keeps acting
    assert agent.version == 1 and swaps == [1] and "refused residual v2" in errors[-1]

    _publish(weights, 3, scale=0.0)  # a plain SAC actor has no base to correct
    agent.act(OBS, BASE)
    assert agent.version == 1 and "refused residual v3" in errors[-1]

    nan_obs = {**OBS, "tcp_pos": np.array([np.nan, 0.0, 0.3], np.float32)}
    assert np.array_equal(agent.act(nan_obs, BASE), BASE) and "skipped" in errors[-1]

    follower = agent.agent.follower
    assert follower is not None
    polls: list[int] = []
    poll = follower.watcher.poll
    follower.watcher.poll = lambda: (polls.append(1), poll())[1]  # type: ignore[method-assign]
    for _ in range(5):
        agent.act(OBS, BASE)
    assert len(polls) == 5  # the weights folder is looked at once per tick


def test_which_runs_a_graph_actor_acts_in(tmp_path: Path) -> None:
    keys = ["joint_pos", "tcp_pos", "tcp_quat"]

    def run(**learner: object) -> OnlineConfig:
        cfg = OnlineConfig()
        for name, value in learner.items():
            setattr(cfg.learner, name, value)
        return cfg

    assert check_streamable(run(), "cartesian_delta", keys) == []
    assert check_streamable(run(algorithm="residual"), "cartesian_delta", keys) == []
    bad = {"rlpd": (run(algorithm="rlpd"), "cartesian_delta"),
           "base": (run(algorithm="residual", residual=ResidualConfig(base="expert")), "cartesian_delta"),
           "reward": (run(algorithm="residual", residual=ResidualConfig(reward="env")), "cartesian_delta"),
           "control mode": (run(algorithm="residual"), "cartesian_pose"),
           "state_keys": (run(algorithm="residual", residual=ResidualConfig(state_keys=["goal_pos"])),
                          "cartesian_delta")}
    for why, (cfg, mode) in bad.items():
        with pytest.raises(ValueError, match=why):
            check_streamable(cfg, mode, keys)
    other = run(algorithm="residual")
    other.policy = str(tmp_path / "another")
    assert "the residual corrects the node's" in check_streamable(other, "cartesian_delta", keys,
                                                                  str(tmp_path / "policy"))[0]

    assert read_run_config(tmp_path) is None  # the learner has not written it yet
    (tmp_path / CONFIG_FILE).write_text("learner: {algorithm: [")  # half written
    assert read_run_config(tmp_path) is None
    save_config(run(algorithm="residual"), tmp_path / CONFIG_FILE)
    written = read_run_config(tmp_path)
    assert written is not None and written.learner.algorithm == "residual"


def test_ticks_carry_the_base_action() -> None:
    stream = StepStream(lambda before, after, grip: np.zeros(7, np.float32))
    assert stream.tick(OBS, BASE + 0.05, human=False, version=1, base_action=BASE) is None
    t = stream.tick(OBS, BASE, human=True, version=1, base_action=BASE - 0.05)
    assert t is not None and t.base_action is not None
    assert np.array_equal(t.base_action, BASE) and np.allclose(t.action, BASE + 0.05)
    last = stream.end_episode(OBS, success=True)
    assert last is not None and last.base_action is not None
    assert np.allclose(last.base_action, BASE - 0.05) and last.reward == 1.0
    assert stream.tick(OBS, BASE, human=False, version=1) is None
    assert stream.end_episode(OBS, success=False).base_action is None  # type: ignore[union-attr]
