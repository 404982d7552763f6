"""The learner with actors on other machines: real learner and actor processes over TCP.

Actors join with ``robot-rl online actor --connect`` (config and weights come over the connection), a wrong
secret is refused and logged, ``robot-rl online status`` reports them, and every step produced reaches the
learner's checkpoint exactly once through a SIGKILL of the learner and of an actor that is then replaced.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.fuzz import record_fault

from robot_rl.core.config import load_config, save_config
from robot_rl.core.transition_columns import decode_transitions
from robot_rl.fleet.delivery import Outbox, read_commit, read_journal, row_digests, transition_digest
from robot_rl.fleet.fleet_status import format_status, read_status
from robot_rl.fleet.remote_run import actor_folder
from robot_rl.fleet.security import PLAINTEXT_ENV
from robot_rl.fleet.wire import CONFIG_FILE, read_secret
from robot_rl.learners.buffers import ReplayBuffer
from robot_rl.learners.online_config import OnlineConfig

QUAD = "robot_rl/QuadHover-RealStandIn-v0"
SMALL = ["learner.residual.sac.hidden=32", "learner.residual.sac.num_critics=2", "learner.residual.sac.batch_size=32",
         "learner.residual.sac.utd_ratio=1", "learner.device=cpu", "learner.update_to_data=0.05",
         "learner.publish_every=5", "learner.updates_per_cycle=5", "learner.residual.warmup_steps=100"]


def fleet_run(tmp: Path, port: int, *overrides: str) -> Path:
    cfg = load_config(OnlineConfig, None, [
        f"actor.env_id={QUAD}", "actor.human_risk=action", "learner.algorithm=residual",
        "learner.residual.base=expert", "learner.residual.reward=env", *SMALL,
        f"fleet.listen=127.0.0.1:{port}", "fleet.status_every_s=0.5", *overrides])
    run = tmp / "run"
    run.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run / CONFIG_FILE)
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "robot_rl.learners.roles", *args], stdout=out,
                                stderr=subprocess.STDOUT)


def wait_for(cond, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def stored_digests(run: Path) -> list[str]:
    """Every step the learner's last checkpoint holds: buffer rows up to the commit, plus the held steps."""
    commit = read_commit(run / "checkpoint")
    assert commit is not None
    steps = ReplayBuffer.load(run / "checkpoint" / "steps")
    assert steps.total_added == commit["buffers"]["steps"] and steps.total_added <= steps.capacity
    out = row_digests(steps.columns, len(steps))
    if commit["held"]:
        out += [transition_digest(t) for t in decode_transitions((run / "checkpoint" / commit["held"]).read_bytes())]
    return out


@pytest.mark.slow
def test_actors_join_over_tls_wrong_secret_is_refused_and_status_reports_them(tmp_path: Path) -> None:
    """Over TLS (a self-signed certificate the actors check), as a learner on a network would serve."""
    port = free_port()
    cert, tls_key = tmp_path / "learner.crt", tmp_path / "learner.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=learner",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tls_key), "-out", str(cert)],
                   check=True, capture_output=True)
    run = fleet_run(tmp_path, port, "actor.episodes=10", f"fleet.tls_cert={cert}", f"fleet.tls_key={tls_key}")
    learner = start(["learner", "--run", str(run)], tmp_path / "learner.log")
    try:
        wait_for(lambda: (run / "learner.json").is_file(), 60, "the learner")
        (tmp_path / "wrong.key").write_text((b"x" * 32).hex())
        (tmp_path / "wrong.key").chmod(0o600)  # a secret readable by others would be refused before connecting
        connect = ["actor", "--connect", f"127.0.0.1:{port}", "--index", "0", "--tls-ca", str(cert)]
        wrong = subprocess.run([sys.executable, "-m", "robot_rl.learners.roles", *connect, "--secret-file",
                                str(tmp_path / "wrong.key"), "--workdir", str(tmp_path / "w")],
                               capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 3 and "refused" in wrong.stderr, (wrong.stdout, wrong.stderr)
        wait_for(lambda: "wrong shared secret" in (tmp_path / "learner.log").read_text(), 10, "the refusal log")
        assert "127.0.0.1" in (tmp_path / "learner.log").read_text()
        right = subprocess.run([sys.executable, "-m", "robot_rl.learners.roles", *connect, "--name", "robot-a",
                                "--secret-file", str(run / "learner.key"), "--workdir", str(tmp_path / "r")],
                               capture_output=True, text=True, timeout=300)
        assert right.returncode == 0, right.stderr[-3000:]
        r = actor_folder(tmp_path / "r", read_secret(run / "learner.key"))
        records = [json.loads(line) for line in (r / "actor_0.jsonl").read_text().splitlines()]
        assert len(records) == 10 and records[-1]["version_end"] >= 1  # weights arrived over TCP and swapped in
        if (r / "weights").is_symlink():  # the weights were kept in shared memory, which is freed at the end
            assert not (r / "weights").exists()
        assert not Outbox(r / "outbox" / "robot-a").numbers()  # all acknowledged before leaving
        assert (r / CONFIG_FILE).read_text() == (run / CONFIG_FILE).read_text()
        status = read_status(run)
        assert status["learner"]["steps"] == sum(r["steps"] for r in records)
        assert status["learner"]["listen"] == f"127.0.0.1:{port}"
        table = format_status(status)
        assert "steps received" in table and "robot-a" in table
        assert list((run / "tensorboard").glob("events.out.tfevents.*"))  # the same numbers, for TensorBoard
        cli = subprocess.run([sys.executable, "-m", "robot_rl.cli.main", "online", "status", str(run)],
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0 and "robot-a" in cli.stdout and QUAD in cli.stdout, cli.stdout + cli.stderr
    finally:
        learner.send_signal(signal.SIGTERM)
        learner.wait(timeout=60)
    assert learner.returncode == 0
    assert sorted(stored_digests(run)) == sorted(read_journal(r / "outbox" / "robot-a"))


@pytest.mark.slow
def test_every_step_is_stored_once_through_a_learner_sigkill_and_a_replaced_actor(tmp_path: Path) -> None:
    """Two TCP actors; the learner is SIGKILLed mid-run and restarted on its port; actor 1 is SIGKILLed and a
    replacement with the same name and folder finishes its work. Count and hash of the steps produced (the
    actors' outbox journals) equal those in the learner's final checkpoint."""
    port = free_port()
    run = fleet_run(tmp_path, port, "actor.episodes=3", "learner.checkpoint_every_s=1.5", "actor.send_every=5")
    logs = tmp_path / "logs"
    logs.mkdir()
    learner = start(["learner", "--run", str(run)], logs / "learner.log")
    key = str(run / "learner.key")
    wait_for(lambda: (run / "learner.json").is_file(), 60, "the learner")

    def actor(i: int) -> subprocess.Popen[bytes]:
        return start(["actor", "--connect", f"127.0.0.1:{port}", "--secret-file", key, "--index", str(i),
                      "--name", f"a{i}", "--workdir", str(tmp_path / f"a{i}")], logs / f"actor_{i}.log")

    def produced(i: int) -> list[str]:
        folder = actor_folder(tmp_path / f"a{i}", read_secret(key)) / "outbox" / f"a{i}"
        return read_journal(folder)

    def committed() -> int:
        return int((read_commit(run / "checkpoint") or {"buffers": {"steps": 0}})["buffers"]["steps"])

    actors = [actor(0), actor(1)]
    try:
        wait_for(lambda: len(produced(0)) > 150 and len(produced(1)) > 150, 120, "the actors to stream")
        wait_for(lambda: (read_commit(run / "checkpoint") or {"buffers": {"steps": 0}})["buffers"]["steps"] > 0, 60,
                 "a checkpoint with steps")
        learner.kill()  # SIGKILL: whatever it received since its last commit is gone with it
        learner.wait()
        killed_at, at_kill = time.monotonic(), committed()
        actors[1].kill()  # and a robot dies too
        actors[1].wait()
        time.sleep(1.0)  # actor 0 keeps producing into its outbox while nobody listens
        learner = start(["learner", "--run", str(run)], logs / "learner.log")
        actors[1] = actor(1)  # the replacement: same name, same folder, re-sends what is not acknowledged
        wait_for(lambda: committed() > at_kill, 180, "the restarted learner to store new steps")
        recovery = time.monotonic() - killed_at  # kill -> restarted, actors back, new steps checkpointed
        for a in actors:
            assert a.wait(timeout=300) == 0, (logs / "actor_0.log").read_text()[-2000:]
    finally:
        for p in actors:
            if p.poll() is None:
                p.kill()
        if learner.poll() is None:
            learner.send_signal(signal.SIGTERM)
            learner.wait(timeout=60)
    assert learner.returncode == 0, (logs / "learner.log").read_text()[-3000:]
    sent = Counter(produced(0) + produced(1))
    stored = Counter(stored_digests(run))
    assert sum(sent.values()) > 600
    assert stored == sent, (sum(stored.values()), sum(sent.values()), len(stored - sent), len(sent - stored))
    assert "resumed from the checkpoint" in (logs / "learner.log").read_text()
    assert os.path.getsize(logs / "learner.log") > 0
    for fault in ("fleet: learner SIGKILL mid-run (restarted on its port)",
                  "fleet: actor SIGKILL mid-run (replaced, same name and folder)"):
        record_fault(fault, happened="restarted", recovery_s=round(recovery, 3), lost="nothing", robot="n/a",
                     steps=sum(sent.values()))


@pytest.mark.slow
def test_a_learner_off_loopback_needs_tls_or_insecure_and_refuses_a_readable_secret(tmp_path: Path) -> None:
    run = fleet_run(tmp_path, free_port(), f"fleet.listen=0.0.0.0:{free_port()}")
    env = {k: v for k, v in os.environ.items() if k != PLAINTEXT_ENV}
    learner = [sys.executable, "-m", "robot_rl.cli.main", "online", "learner", "--run", str(run)]
    refused = subprocess.run(learner, env=env, capture_output=True, text=True, timeout=180)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "must be TLS" in refused.stdout and "--insecure" in refused.stdout
    (run / "STOP").touch()  # opted out, it serves, then stops at once
    allowed = subprocess.run([*learner, "--insecure"], env=env, capture_output=True, text=True, timeout=180)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "INSECURE" in allowed.stderr and "unencrypted" in allowed.stderr
    (run / "learner.key").chmod(0o644)
    readable = subprocess.run([*learner, "--insecure"], env=env, capture_output=True, text=True, timeout=180)
    assert readable.returncode == 2 and f"chmod 600 {run / 'learner.key'}" in readable.stdout, readable.stdout
