"""Transport: transitions stream from actor processes to the learner; versioned weights reach the actors."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from robot_rl.core.transition import Transition
from robot_rl.fleet.transport import SOCKET_SEND_BUFFER, SocketTransitionClient, SocketTransitionServer
from robot_rl.runtime.weights import WeightsPublisher, WeightsWatcher, list_versions


def actor(address: str, authkey: bytes, weights: str, actor_id: int, steps: int) -> None:
    """Acts with the latest weights ('w' is the action), sends every 5 steps, checks for weights every step."""
    client = SocketTransitionClient(address, authkey)
    watcher = WeightsWatcher(weights)
    version, value, pending = 0, 0.0, []
    for step in range(steps):
        found = watcher.poll()
        if found is not None:
            version, value = found[0], float(load_file(str(found[1] / "model.safetensors"))["w"][0])
        obs = {"s": np.array([actor_id, step], np.float32)}
        pending.append(Transition(obs, obs, np.array([value], np.float32), 0.0, False, False, actor_id, step,
                                  policy_version=version))
        if len(pending) == 5:
            client.send(pending)
            pending = []
        time.sleep(0.01)
    client.send(pending)
    client.close()


def write_weights(value: float) -> Callable[[Path, int], None]:
    def write(folder: Path, version: int) -> None:
        save_file({"w": np.array([value], np.float32)}, str(folder / "model.safetensors"))
        (folder / "policy.json").write_text(json.dumps({"version": version}))
    return write


def test_two_actor_processes_stream_and_pick_up_new_weights(tmp_path: Path) -> None:
    server = SocketTransitionServer(str(tmp_path / "learner.sock"))
    publisher = WeightsPublisher(tmp_path / "weights", keep=2)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=actor, args=(server.address, server.authkey, str(tmp_path / "weights"), i, 150))
             for i in range(2)]
    for p in procs:
        p.start()
    got: list[Transition] = []
    deadline = time.monotonic() + 30
    published: dict[int, float] = {}
    try:
        while any(p.is_alive() for p in procs) or server.num_actors:
            got += server.receive(timeout=0.05)
            # publish new weights while the actors run, every 60 received steps
            if len(got) >= 60 * (len(published) + 1) and len(published) < 3:
                value = 10.0 * (len(published) + 1)
                published[publisher.publish(write_weights(value))] = value
            assert time.monotonic() < deadline, "actors did not finish"
        got += server.receive(timeout=0.1)
    finally:
        server.close()
        for p in procs:
            p.join(5)
    assert all(p.exitcode == 0 for p in procs)
    assert len(got) == 300
    per_actor = {i: sorted(t.step for t in got if t.episode_id == i) for i in range(2)}
    assert per_actor == {0: list(range(150)), 1: list(range(150))}  # nothing lost, nothing doubled
    assert len(published) >= 2
    for t in got:  # the action always matches the weights version the actor reports
        assert t.policy_version == 0 or float(t.action[0]) == published[t.policy_version]
    versions = {t.policy_version for t in got}
    assert versions & set(published)  # new weights were loaded while the actors ran
    assert len(list_versions(tmp_path / "weights")) == 2  # old versions pruned
    assert server.dropped.count("actor disconnected (EOFError)") == 2


def test_publisher_is_atomic_and_resumes_numbering(tmp_path: Path) -> None:
    publisher = WeightsPublisher(tmp_path / "w", keep=3)
    assert publisher.publish(write_weights(1.0)) == 1

    def broken(folder: Path, version: int) -> None:
        (folder / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("learner crashed mid-write")

    with pytest.raises(RuntimeError):
        publisher.publish(broken)
    assert [v for v, _ in list_versions(tmp_path / "w")] == [1]
    assert not list((tmp_path / "w").glob(".*"))  # no temp folder left behind
    watcher = WeightsWatcher(tmp_path / "w")
    assert watcher.poll() == (1, tmp_path / "w" / "v1")
    assert watcher.poll() is None
    restarted = WeightsPublisher(tmp_path / "w")
    assert restarted.publish(write_weights(2.0)) == 2
    assert watcher.poll() == (2, tmp_path / "w" / "v2")


def test_wrong_key_and_garbage_are_refused(tmp_path: Path) -> None:
    server = SocketTransitionServer(str(tmp_path / "s.sock"))
    try:
        with pytest.raises(Exception, match=r"digest|auth"):
            Client(server.address, family="AF_UNIX", authkey=b"wrong")
        raw = Client(server.address, family="AF_UNIX", authkey=server.authkey)
        good = SocketTransitionClient(server.address, server.authkey)
        deadline = time.monotonic() + 5
        while server.num_actors < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        raw.send_bytes(b"not safetensors")
        obs = {"s": np.zeros(1, np.float32)}
        good.send([Transition(obs, obs, np.zeros(1, np.float32), 0.0, False, False, 0, 0)])
        got: list[Transition] = []
        while len(got) < 1 and time.monotonic() < deadline:
            got += server.receive(timeout=0.1)
        assert len(got) == 1
        assert any("malformed" in d for d in server.dropped) and server.num_actors == 1
        good.close()
        raw.close()
    finally:
        server.close()


def test_an_actor_socket_holds_a_fixed_amount_whatever_the_hosts_default(tmp_path: Path) -> None:
    """A learner that stops reading (paced) stops its actors within SOCKET_SEND_BUFFER bytes, not within the
    host's ``net.core.wmem_default`` (a few MB on some hosts: a whole run fitted in the socket there)."""
    server = SocketTransitionServer(str(tmp_path / "s.sock"))
    client = SocketTransitionClient(server.address, server.authkey)
    assert 0 < client.send_buffer <= SOCKET_SEND_BUFFER
    obs = {"s": np.zeros(2500, np.float32)}  # ~10 kB a step
    batch = [Transition(obs, obs, np.zeros(1, np.float32), 0.0, False, False, 0, i) for i in range(5)]
    sent = [0]

    def send_forever() -> None:
        try:
            while True:
                client.send(batch)
                sent[0] += 1
        except OSError:  # the server closed
            pass

    thread = threading.Thread(target=send_forever, daemon=True)
    thread.start()
    time.sleep(1.0)
    held = sent[0] * 5 * 2 * obs["s"].nbytes  # observation and next observation
    print(f"{sent[0]} batches, {held} bytes held")
    assert held <= SOCKET_SEND_BUFFER, f"{held} bytes went into a socket nobody reads"
    received = server.receive(timeout=1.0)
    assert received and received[0].observation["s"].shape == (2500,)  # what waited is intact
    server.close()
    client.close()
    thread.join(timeout=5.0)
