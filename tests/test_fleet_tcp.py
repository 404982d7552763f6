"""Actors on other hosts: the TCP transport with a shared secret, acknowledgements and re-sends."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.transition import Transition
from robot_rl.fleet.delivery import Inbox, Outbox
from robot_rl.fleet.security import PLAINTEXT_ENV, InsecureTransportError, RefusalLimiter
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.tcp_transport import TcpTransitionServer
from robot_rl.fleet.wire import AuthError, FrameError, client_handshake, recv_frame, send_frame

KEY = b"k" * 32

ACTOR = """
import sys, numpy as np
from robot_rl.core.transition import Transition
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.wire import AuthError
port, key, folder = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3]
client = TcpActorClient(("127.0.0.1", port), key, "remote", Outbox(folder), info={"task": "reach"})
try:
    client.connect()
except AuthError as exc:
    print("refused:", exc)
    sys.exit(3)
for k in range(10):
    obs = {"state": np.array([k], np.float32)}
    client.send([Transition(observation=obs, next_observation=obs, action=np.zeros(1, np.float32), reward=0.0,
                            terminated=False, truncated=False, episode_id=0, step=k)])
print("acked", client.poll_acks(timeout=10.0))
"""


def step(k: int) -> Transition:
    obs = {"state": np.array([k], np.float32)}
    return Transition(observation=obs, next_observation=obs, action=np.zeros(1, np.float32), reward=0.0,
                      terminated=False, truncated=False, episode_id=0, step=k)


def drain(server: TcpTransitionServer, want: int, seconds: float = 20.0) -> list[Transition]:
    out: list[Transition] = []
    deadline = time.monotonic() + seconds
    while len(out) < want and time.monotonic() < deadline:
        out.extend(server.receive(timeout=0.1))
    return out


def test_an_actor_process_with_the_secret_trains_one_without_it_is_refused_and_logged(tmp_path: Path) -> None:
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    port = server.address[1]
    try:
        wrong = subprocess.run([sys.executable, "-c", ACTOR, str(port), (b"x" * 32).hex(), str(tmp_path / "w")],
                               capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 3 and "refused" in wrong.stdout, wrong.stderr
        assert any("wrong shared secret" in r and "127.0.0.1" in r for r in server.refused), server.refused
        right = subprocess.Popen([sys.executable, "-c", ACTOR, str(port), KEY.hex(), str(tmp_path / "r")],
                                 stdout=subprocess.PIPE, text=True)
        got = drain(server, 10)
        assert [int(t.observation["state"][0]) for t in got] == list(range(10))
        assert server.status()[0]["task"] == "reach" and server.status()[0]["steps"] == 10
        server.acknowledge(server.inbox.checkpoint_done())
        out, _ = right.communicate(timeout=30)
        assert right.returncode == 0 and "acked 10" in out
        assert not list((tmp_path / "r").glob("*.safetensors"))  # the actor forgot what is safe
    finally:
        server.close()


def test_a_malformed_or_oversized_batch_drops_its_connection_and_the_learner_serves_on(tmp_path: Path) -> None:
    server = TcpTransitionServer(KEY, host="127.0.0.1", max_payload=64 * 1024)
    try:
        import socket

        for payload in (b"not safetensors", b"\0" * (128 * 1024)):
            with socket.create_connection(server.address) as sock:
                client_handshake(sock, KEY, {"actor": "bad"})
                recv_frame(sock, max_payload=0)  # resume
                send_frame(sock, {"type": "batch", "seq": 1}, payload)
                deadline = time.monotonic() + 10
                while server.num_actors and time.monotonic() < deadline:
                    server.receive(timeout=0.1)
        assert any("not a valid safetensors" in r for r in server.refused), server.refused
        assert any("exceeds the limit" in r for r in server.refused), server.refused
        good = TcpActorClient(server.address, KEY, "good", Outbox(tmp_path / "g"))
        good.connect()
        good.send([step(0), step(1)])
        assert len(drain(server, 2)) == 2
    finally:
        server.close()


def test_a_killed_learner_restarts_from_its_checkpoint_and_gets_every_batch_once(tmp_path: Path) -> None:
    inbox_file = tmp_path / "inbox.json"
    server = TcpTransitionServer(KEY, Inbox.load(inbox_file), host="127.0.0.1")
    client = TcpActorClient(server.address, KEY, "a0", Outbox(tmp_path / "a0"))
    client.connect()
    stored: list[Transition] = []
    for k in range(4):
        client.send([step(k)])
    stored.extend(drain(server, 4))
    server.inbox.checkpoint_done()
    server.inbox.save(inbox_file)  # the checkpoint holds 0..3
    server.acknowledge(server.inbox.checkpointed)
    client.poll_acks(timeout=5.0)
    for k in range(4, 7):
        client.send([step(k)])
    unsaved = drain(server, 3)  # received, never checkpointed: lost with the learner
    assert len(unsaved) == 3
    port = server.address[1]
    server.close()  # the learner dies; a new one comes up on the same port from its checkpoint
    server = TcpTransitionServer(KEY, Inbox.load(inbox_file), host="127.0.0.1", port=port)
    try:
        client.send([step(7)])  # the old connection is dead: kept on disk
        client.close()
        client.connect()  # re-sends 4..7
        client.send([step(8)])
        stored.extend(drain(server, 5))
        assert sorted(int(t.observation["state"][0]) for t in stored) == list(range(9))
        assert server.inbox.duplicates == 0 and client.outbox.acked == 4
    finally:
        server.close()


def test_plaintext_off_loopback_is_refused_unless_explicitly_allowed_and_then_loudly_warned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(PLAINTEXT_ENV, raising=False)
    with pytest.raises(InsecureTransportError, match=r"not a loopback address.*tls_cert.*--insecure"):
        TcpTransitionServer(KEY, host="0.0.0.0")
    with pytest.raises(InsecureTransportError, match=r"192\.0\.2\.7"):
        TcpActorClient(("192.0.2.7", 7450), KEY, "robot", Outbox(tmp_path / "refused"))
    with pytest.raises(InsecureTransportError):  # a host name is not assumed to be this machine
        TcpActorClient(("learner.lan", 7450), KEY, "robot", Outbox(tmp_path / "refused"))
    with caplog.at_level(logging.WARNING, logger="robot_rl.fleet.security"):
        server = TcpTransitionServer(KEY, host="0.0.0.0", allow_plaintext=True)
        assert "INSECURE" in caplog.text and "0.0.0.0" in caplog.text
        caplog.clear()
        monkeypatch.setenv(PLAINTEXT_ENV, "1")  # the environment's opt-out (what --insecure sets)
        TcpActorClient(("192.0.2.7", 7450), KEY, "robot", Outbox(tmp_path / "allowed"))
        assert "INSECURE" in caplog.text and "192.0.2.7" in caplog.text
    try:  # opted out, it serves (here to an actor on this machine)
        client = TcpActorClient(("127.0.0.1", server.address[1]), KEY, "local", Outbox(tmp_path / "local"))
        client.connect()
        client.send([step(0)])
        assert len(drain(server, 1)) == 1
        client.close()
    finally:
        server.close()


def test_the_refusal_limiter_blocks_after_n_failures_within_the_window_and_forgets_after_the_block() -> None:
    limiter = RefusalLimiter(max_failures=3, window_s=10.0, block_s=30.0)
    assert not limiter.failed("10.0.0.5", now=0.0) and not limiter.failed("10.0.0.5", now=5.0)
    assert not limiter.failed("10.0.0.5", now=20.0)  # the first two fell out of the window: no block
    assert not limiter.blocked("10.0.0.5", now=21.0)
    assert not limiter.failed("10.0.0.5", now=22.0)
    assert limiter.failed("10.0.0.5", now=23.0)  # three within 10 s
    assert limiter.blocked("10.0.0.5", now=24.0) and limiter.blocked("10.0.0.5", now=52.9)
    assert not limiter.blocked("10.0.0.6", now=24.0)  # per peer
    assert limiter.turned_away["10.0.0.5"] == 2
    assert not limiter.blocked("10.0.0.5", now=53.0)  # the block has passed
    assert not limiter.failed("10.0.0.5", now=54.0)  # and the count starts afresh


def test_a_client_that_keeps_failing_auth_is_turned_away_unserved_until_its_block_passes(tmp_path: Path) -> None:
    server = TcpTransitionServer(KEY, host="127.0.0.1",
                                 limiter=RefusalLimiter(max_failures=3, window_s=60.0, block_s=1.5))
    try:
        intruder = TcpActorClient(server.address, b"w" * 32, "intruder", Outbox(tmp_path / "w"))
        for _ in range(3):
            with pytest.raises(AuthError):
                intruder.connect(timeout=5)
        deadline = time.monotonic() + 5
        while not any("blocking 127.0.0.1" in r for r in server.refused) and time.monotonic() < deadline:
            time.sleep(0.01)
        blocked_at = time.monotonic()
        assert any("after 3 failed handshakes" in r for r in server.refused), server.refused
        good = TcpActorClient(server.address, KEY, "good", Outbox(tmp_path / "g"))
        for _ in range(2):  # even the right secret is not heard while the address is blocked
            with pytest.raises(FrameError):
                good.connect(timeout=5)
        assert server.limiter.turned_away["127.0.0.1"] == 2
        assert sum("unserved" in r for r in server.refused) == 1  # noted once per block, not per connection
        assert server.num_actors == 0
        time.sleep(max(0.0, 1.6 - (time.monotonic() - blocked_at)))
        good.connect(timeout=5)  # the block passed: served again
        good.send([step(0), step(1)])
        assert len(drain(server, 2)) == 2
        good.close()
    finally:
        server.close()
