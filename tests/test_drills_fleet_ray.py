"""Fault drill of a Ray fleet: a whole worker node SIGKILLed mid-run, its actors rescheduled (slow: ~3 min).

The delivery invariant as in tests/test_drills_fleet.py: the steps the actors produced (their outbox
journals) equal the steps the learner stored, count and hash, and ``record_fault`` reports the drill.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.fuzz import record_fault

pytest.importorskip("ray")
from robot_rl.core.config import load_config, save_config
from robot_rl.core.transition_columns import decode_transitions
from robot_rl.fleet.delivery import read_commit, read_journal, row_digests, transition_digest
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.online_config import OnlineConfig

pytestmark = [pytest.mark.slow, pytest.mark.ray]
QUAD = "robot_rl/QuadHover-RealStandIn-v0"
EPISODES = 10
"""Per actor: enough that the second node's actor is still running when the node is killed. With 6, one suite run
got that actor's records back from the second node: it had finished all of them before the kill's trigger (both
actors streaming, the learner past 200 stored steps) was met."""


def wait_for(cond: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll ``cond`` until true (generous deadline); returns the seconds it took."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < seconds, f"timed out after {seconds} s waiting for {what}"
        time.sleep(0.2)
    return time.monotonic() - start


def _processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line) of every process on this machine."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                out[int(p.name)] = (int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]),
                                    (p / "cmdline").read_bytes())
    return out


def _tree(marker: bytes, *also: bytes) -> list[int]:
    """Processes whose command line has ``marker`` (and each of ``also``), with all their descendants."""
    procs = _processes()
    found = {pid for pid, (_, cmd) in procs.items() if marker in cmd and all(a in cmd for a in also)}
    while True:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in found} - found
        if not more:
            return sorted(found)
        found |= more


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_a_stopped_ray_worker_node_gets_its_actors_rescheduled_and_every_step_stored_once(tmp_path: Path) -> None:
    """A two-node Ray cluster on this machine; the second node (its raylet, its workers: its whole process
    group) is SIGKILLed mid-run. Ray restarts its actors on the head node, they re-run from their outboxes
    (same machine, same folders), the run finishes, and the steps produced equal the steps stored."""
    ray = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="rd", dir="/tmp")  # short: Ray's socket paths live under it
    token = tmp_path / "ray_token"
    token.write_text(secrets.token_hex(32))
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    common = ["--disable-usage-stats"]
    driver = None
    try:
        subprocess.run([ray, "start", "--head", "--port", str(port), "--num-cpus", "2", "--resources",
                        '{"head_node": 1}', "--include-dashboard", "false", "--temp-dir", temp, *common],
                       env=env, check=True, capture_output=True, timeout=180)
        node = subprocess.Popen([ray, "start", "--address", address, "--num-cpus", "2", "--resources",
                                 '{"second_node": 1}', *common], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        assert node.wait(timeout=180) == 0
        cfg = load_config(OnlineConfig, None, [
            f"actor.env_id={QUAD}", "actor.human_risk=action", "learner.algorithm=residual",
            "learner.residual.base=expert", "learner.residual.reward=env", "learner.residual.sac.hidden=32",
            "learner.residual.sac.batch_size=32", "learner.residual.sac.num_critics=2", "learner.device=cpu",
            "learner.update_to_data=0.05", "learner.publish_every=5", "learner.updates_per_cycle=5",
            "learner.residual.warmup_steps=100", "actors=2", f"actor.episodes={EPISODES}",
            "learner.checkpoint_every_s=1",
            "fleet.learner_resources={num_cpus: 0.5, head_node: 0.1}", "fleet.actor_resources={num_cpus: 0.5}",
            "fleet.actor_strategy=SPREAD", "fleet.status_every_s=0.5"])
        save_config(cfg, tmp_path / "fleet.yaml")
        run = tmp_path / "run"
        driver = subprocess.Popen([sys.executable, "-m", "robot_rl.cli.main", "online", "run", "--ray", address,
                                   "--config", str(tmp_path / "fleet.yaml"), "--run", str(run), "--insecure"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run_id = hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:12]
        fleet_tmp = Path(tempfile.gettempdir()) / "robot_rl_fleet" / run_id

        def journals() -> list[Path]:
            return sorted(fleet_tmp.glob("actor-*/run-*/outbox/ray-*"))

        def started() -> bool:
            assert driver is not None and driver.poll() is None, "the run ended early"
            steps = (read_commit(run / "checkpoint") or {"buffers": {"steps": 0}})["buffers"]["steps"]
            return steps > 200 and len(journals()) == 2 and all(read_journal(j) for j in journals())

        wait_for(started, 300, "both actors to stream and the learner to store steps")
        second = _tree(b"raylet", temp.encode(), b"second_node")  # its raylet and every worker it started
        on_node = [pid for pid in second if b"ActorWorker" in _processes().get(pid, (0, b""))[1]]
        assert on_node, "no actor was placed on the second node"
        _kill(second)  # the whole node at once: raylet, object store, agents, workers
        killed_at = time.monotonic()
        at_kill = {j: len(read_journal(j)) for j in journals()}  # the dead node's actor stops producing
        wait_for(lambda: all(len(read_journal(j)) > n for j, n in at_kill.items()) or driver.poll() is not None,
                 300, "the rescheduled actor to produce again")
        recovery = time.monotonic() - killed_at  # kill -> node declared dead, actor restarted, producing again
        out, err = driver.communicate(timeout=400)
        assert driver.returncode == 0, (out[-2000:], err[-4000:])
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        _kill(_tree(temp.encode()))  # this cluster's processes only (by id), never other runs' Ray
        shutil.rmtree(temp, ignore_errors=True)
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"  # `ray start` notes its head here
        if current.exists() and current.read_text().strip() in (address, f"{temp}"):
            current.unlink()  # so a later ray.init() does not try to join this dead cluster

    episodes = [json.loads(line) for f in sorted(run.glob("actor_*.jsonl")) for line in f.read_text().splitlines()]
    assert len(episodes) == 2 * EPISODES  # the rescheduled actors ran their episodes to the end
    learner_node = json.loads((run / "ray_learner.json").read_text())["node"]
    assert {e["node"] for e in episodes} == {learner_node}  # everyone finished on the head node
    steps = ReplayBuffer.load(run / "checkpoint" / "steps")
    assert len(journals()) == 2
    produced = Counter(d for folder in journals() for d in read_journal(folder))
    shutil.rmtree(fleet_tmp, ignore_errors=True)
    stored = Counter(row_digests(steps.columns, len(steps)))
    held = read_commit(run / "checkpoint")["held"]  # type: ignore[index]
    if held:  # steps of an episode cut short by the kill wait there for a next step that never comes
        stored.update(transition_digest(t) for t in decode_transitions((run / "checkpoint" / held).read_bytes()))
    assert stored == produced, (sum(stored.values()), sum(produced.values()))  # nothing lost, nothing twice
    record_fault("fleet: Ray worker node SIGKILLed (its actors rescheduled)", happened="rescheduled",
                 recovery_s=round(recovery, 3), lost="nothing", robot="n/a", actors_on_node=len(on_node),
                 steps=sum(stored.values()))
