"""A learner killed (SIGKILL) mid-run restarts from its checkpoint with its buffers intact."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.transition import SegmentSource, Transition
from robot_rl.learners.buffers import ReplayBuffer, mixed_sample, route
from robot_rl.learners.sac_rlpd import SACLearner, SACLearnerConfig


def step(i: int) -> Transition:
    obs = {"x": np.array([i % 50 / 50], np.float32), "goal": np.zeros(1, np.float32)}
    human = i % 4 == 0
    return Transition(obs, obs, np.array([0.1], np.float32), 0.0, False, False, i // 50, i % 50,
                      is_intervention=human, segment_source=SegmentSource.HUMAN if human else SegmentSource.POLICY)


def learner_process(folder: str, start: int) -> None:
    """Receives (here: makes) steps, trains, checkpoints every 40 steps; runs until killed."""
    root = Path(folder)
    import torch

    torch.set_num_threads(1)
    if (root / "learner").is_dir():
        learner = SACLearner.load(root / "learner")
        online, demo = ReplayBuffer.load(root / "online"), ReplayBuffer.load(root / "demo")
    else:
        learner = SACLearner(SACLearnerConfig(state_keys=["x", "goal"], hidden=32, num_critics=2, batch_size=16),
                             {"x": 1, "goal": 1}, 1)
        online, demo = ReplayBuffer(10_000), ReplayBuffer(10_000)
    rng = np.random.default_rng(0)
    i = start
    while True:
        route([step(i)], online, demo)
        i += 1
        learner.update([mixed_sample(online, demo, 16, 0.5, rng)])
        if i % 40 == 0:
            learner.save(root / "learner")
            online.save(root / "online")
            demo.save(root / "demo")
            (root / "saved.tmp").write_text(json.dumps({"online": online.total_added}))
            os.replace(root / "saved.tmp", root / "saved.json")


@pytest.mark.slow
def test_killed_learner_resumes_with_buffers_intact(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=learner_process, args=(str(tmp_path), 0))
    proc.start()
    deadline = time.monotonic() + 60
    while not (tmp_path / "saved.json").is_file() or json.loads((tmp_path / "saved.json").read_text())["online"] < 120:
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up, possibly in the middle of a save
    proc.join(10)

    online, demo = ReplayBuffer.load(tmp_path / "online"), ReplayBuffer.load(tmp_path / "demo")
    learner = SACLearner.load(tmp_path / "learner")
    n = online.total_added
    assert n >= 120 and n % 40 == 0  # a complete checkpoint, never a half-written one
    assert len(online) == n and len(demo) == n // 4  # every fourth step was an intervention
    assert learner.updates in (n, n + 40)  # killed after the learner's save but before the buffers' is possible
    assert [t.step + 50 * t.episode_id for t in online.transitions()] == list(range(n))
    assert all(t.is_intervention for t in demo.transitions())

    # restart and run on: the counts continue from the checkpoint
    proc = ctx.Process(target=learner_process, args=(str(tmp_path), n))
    proc.start()
    while json.loads((tmp_path / "saved.json").read_text())["online"] < n + 80:
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    again = ReplayBuffer.load(tmp_path / "online")
    assert again.total_added >= n + 80
    assert [t.step + 50 * t.episode_id for t in again.transitions()] == list(range(again.total_added))
