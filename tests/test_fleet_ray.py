"""A real two-node Ray cluster on this machine (``ray start --head`` + a second ``ray start --address``) runs a
short online run through ``robot-rl online run --ray ADDRESS``: the learner on the head node, actors spread
over both nodes, weights from Ray's object store; the actors mix two tasks (hover and track) and the
learner reports each. Midway the learner's process is SIGKILLed: Ray restarts it, it resumes from its
checkpoint on a new port, the actors find it and re-send, and every step produced is stored exactly once
(count and hash against the actors' outbox journals)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")
from robot_rl.core.config import load_config, save_config
from robot_rl.fleet.delivery import read_commit, read_journal, row_digests
from robot_rl.fleet.fleet_status import read_status
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.online_config import OnlineConfig

pytestmark = [pytest.mark.slow, pytest.mark.ray]
QUAD = "robot_rl/QuadHover-RealStandIn-v0"
TRACK = "robot_rl/QuadTrack-RealStandIn-v0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Head (1 CPU, resource head_node) and a second node (2 CPUs, resource second_node), token-authenticated."""
    ray = str(Path(sys.executable).with_name("ray"))
    token = tmp_path / "ray_token"
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--disable-usage-stats"]
    try:
        subprocess.run([ray, "start", "--head", "--port", str(port), "--num-cpus", "1", "--resources",
                        '{"head_node": 1}', "--include-dashboard", "false", *common],
                       env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([ray, "start", "--address", address, "--num-cpus", "2", "--resources",
                        '{"second_node": 1}', *common], env=env, check=True, capture_output=True, timeout=120)
        yield address, env
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_a_two_node_ray_cluster_runs_learner_and_actors_on_both_nodes(tmp_path: Path,
                                                                      cluster: tuple[str, dict[str, str]]) -> None:
    address, env = cluster
    cfg = load_config(OnlineConfig, None, [
        f"actor.env_id={QUAD}", "actor.human_risk=action", "learner.algorithm=residual", "learner.residual.base=expert",
        "learner.residual.reward=env", "learner.residual.sac.hidden=32", "learner.residual.sac.batch_size=32",
        "learner.residual.sac.num_critics=2", "learner.residual.sac.utd_ratio=1", "learner.device=cpu",
        "learner.update_to_data=0.05", "learner.publish_every=5", "learner.updates_per_cycle=5",
        "learner.residual.warmup_steps=100", "actors=3", "actor.episodes=8", "learner.checkpoint_every_s=1",
        "fleet.learner_resources={num_cpus: 0.5, head_node: 0.1}", "fleet.actor_resources={num_cpus: 0.5}",
        "fleet.actor_strategy=SPREAD", "fleet.status_every_s=0.5", f"fleet.tasks=[{QUAD}, {TRACK}]"])
    config = tmp_path / "fleet.yaml"
    save_config(cfg, config)
    run = tmp_path / "run"
    driver = subprocess.Popen([sys.executable, "-m", "robot_rl.cli.main", "online", "run", "--ray", address,
                               "--config", str(config), "--run", str(run),
                               "--insecure"],  # the nodes reach the learner by the machine's address, no TLS
                              env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while (read_commit(run / "checkpoint") or {"buffers": {"steps": 0}})["buffers"]["steps"] < 500:
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.2)
        first = json.loads((run / "ray_learner.json").read_text())
        os.kill(first["pid"], signal.SIGKILL)  # the learner's process dies mid-run
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, (out[-2000:], err[-4000:])
    episodes = [json.loads(line) for f in sorted(run.glob("actor_*.jsonl")) for line in f.read_text().splitlines()]
    assert len(episodes) == 24
    learner_node = json.loads((run / "ray_learner.json").read_text())["node"]
    actor_nodes = {e["node"] for e in episodes}
    assert len(actor_nodes) == 2 and learner_node in actor_nodes  # the actors ran on both nodes
    assert max(e["version_end"] for e in episodes) >= 1  # weights reached the actors (Ray's object store)
    steps = ReplayBuffer.load(run / "checkpoint" / "steps")
    assert steps.total_added == sum(e["steps"] for e in episodes)  # every step, once
    run_id = hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:12]
    journals = sorted((Path(tempfile.gettempdir()) / "robot_rl_fleet" / run_id).glob("actor-*/run-*/outbox/ray-*"))
    assert len(journals) == 3
    produced = Counter(d for folder in journals for d in read_journal(folder))
    assert Counter(row_digests(steps.columns, len(steps))) == produced
    log = [json.loads(line) for line in (run / "learner_log.jsonl").read_text().splitlines()]
    assert [v["version"] for v in log] == sorted(v["version"] for v in log)  # the restarted learner numbers on
    status = read_status(run)
    assert status["learner"]["steps"] == steps.total_added and status["learner"]["listen"]
    # a mixed fleet: actors 0 and 2 hover, actor 1 tracks; the stored steps say which task made them
    per_task = {t: sum(e["steps"] for e in episodes if e["task"] == t) for t in (QUAD, TRACK)}
    assert per_task[QUAD] > 0 and per_task[TRACK] > 0
    stored_task = steps.columns["task"][: len(steps)]
    assert [int((stored_task == k).sum()) for k in (0, 1)] == [per_task[QUAD], per_task[TRACK]]
    assert {t: status["tasks"][t]["stored"] for t in (QUAD, TRACK)} == per_task
    assert sorted(a["actor"] for a in status["actors"]) == ["ray-0", "ray-1", "ray-2"]
