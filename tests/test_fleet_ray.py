"""A real two-node Ray cluster on this machine (``ray start --head`` + a second ``ray start --address``) runs a
short online run through ``robot-rl online run --ray ADDRESS``: the learner on the head node, actors spread
over both nodes, weights from Ray's object store, every step in the learner's checkpoint; the actors mix
two tasks (hover and track) and the learner reports each."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")
from robot_rl.core.config import load_config, save_config
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.fleet_status import read_status
from robot_rl.learners.online_config import OnlineConfig

pytestmark = pytest.mark.slow
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
        "learner.residual.warmup_steps=100", "actors=3", "actor.episodes=6",
        "fleet.learner_resources={num_cpus: 0.5, head_node: 0.1}", "fleet.actor_resources={num_cpus: 0.5}",
        "fleet.actor_strategy=SPREAD", "fleet.status_every_s=0.5", f"fleet.tasks=[{QUAD}, {TRACK}]"])
    config = tmp_path / "fleet.yaml"
    save_config(cfg, config)
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "online", "run", "--ray", address,
                          "--config", str(config), "--run", str(run)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    episodes = [json.loads(line) for f in sorted(run.glob("actor_*.jsonl")) for line in f.read_text().splitlines()]
    assert len(episodes) == 18
    learner_node = json.loads((run / "ray_learner.json").read_text())["node"]
    actor_nodes = {e["node"] for e in episodes}
    assert len(actor_nodes) == 2 and learner_node in actor_nodes  # the actors ran on both nodes
    assert max(e["version_end"] for e in episodes) >= 1  # weights reached the actors (Ray's object store)
    steps = ReplayBuffer.load(run / "checkpoint" / "steps")
    assert steps.total_added == sum(e["steps"] for e in episodes)  # every step, once
    status = read_status(run)
    assert status["learner"]["steps"] == steps.total_added and status["learner"]["listen"]
    # a mixed fleet: actors 0 and 2 hover, actor 1 tracks; the stored steps say which task made them
    per_task = {t: sum(e["steps"] for e in episodes if e["task"] == t) for t in (QUAD, TRACK)}
    assert per_task[QUAD] > 0 and per_task[TRACK] > 0
    stored_task = steps.columns["task"][: len(steps)]
    assert [int((stored_task == k).sum()) for k in (0, 1)] == [per_task[QUAD], per_task[TRACK]]
    assert {t: status["tasks"][t]["steps"] for t in (QUAD, TRACK)} == per_task
    assert sorted(a["actor"] for a in status["actors"]) == ["ray-0", "ray-1", "ray-2"]
