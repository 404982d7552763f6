"""The weight push: each version mapped and hashed once by the learner, streamed into the actors' folders.

The actor hashes and writes a weights payload chunk by chunk as it arrives (robot_rl.fleet.wire.receive_weights);
these tests hold it to the checks of the whole-payload path: a flipped byte, a wrong size, a name with a path or
a duplicate name is refused with nothing written, and the connection goes on with the next frame.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from robot_rl.fleet.tcp_transport import TcpTransitionServer
from robot_rl.fleet.wire import (
    MAGIC,
    PREFIX,
    FrameError,
    Payload,
    WeightsPacker,
    WeightsRefused,
    pack_weights,
    receive_weights,
    recv_header,
    send_frame,
    unpack_weights,
)

KEY = b"w" * 32


def publish(root: Path, version: int, size: int = 1 << 20) -> Path:
    """A published ``v<N>/``: a weights file of ``size`` random bytes and a small JSON."""
    folder = root / f"v{version}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(os.urandom(size))
    (folder / "policy.json").write_text(f'{{"version": {version}}}')
    return folder


def same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names)


@pytest.fixture
def pipe() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    with a, b:
        yield a, b


def send(sock: socket.socket, header: dict[str, Any], payload: Payload) -> threading.Thread:
    """Send on a thread (a payload larger than the socket's buffer would block the test otherwise)."""
    thread = threading.Thread(target=send_frame, args=(sock, header, payload), daemon=True)
    thread.start()
    return thread


def receive(sock: socket.socket, root: Path) -> Path:
    header, size = recv_header(sock, max_payload=1 << 30)
    return receive_weights(sock, header, size, root)


def test_a_streamed_version_is_byte_identical_and_the_learner_hashes_it_once(tmp_path: Path,
                                                                            pipe: tuple[socket.socket, ...]) -> None:
    src = publish(tmp_path / "learner", 4, size=3 << 20)
    packer = WeightsPacker(tmp_path / "learner")
    header, parts = packer.frame(4)
    assert packer.frame(4)[1] is parts  # the TCP broadcast and Ray's put take the same mapping
    assert [f["sha256"] for f in header["files"]] == [
        hashlib.sha256((src / n).read_bytes()).hexdigest() for n in ("model.safetensors", "policy.json")]
    sender = send(pipe[0], header, parts)
    got = receive(pipe[1], tmp_path / "actor")
    sender.join()
    assert got == tmp_path / "actor" / "v4" and same_files(src, got)
    assert sorted(p.name for p in (tmp_path / "actor").iterdir()) == ["v4"]  # no hidden folder left
    assert pack_weights(src, 4) == (header, b"".join(parts))  # Ray's frame: the same bytes


LIES = {
    "flipped byte": lambda h, p: (h, p[:100] + bytes([p[100] ^ 1]) + p[101:]),
    "size one short": lambda h, p: ({**h, "files": [{**h["files"][0], "size": h["files"][0]["size"] - 1},
                                                     h["files"][1]]}, p),
    "sizes shifted": lambda h, p: ({**h, "files": [{**h["files"][0], "size": h["files"][0]["size"] - 1},
                                                    {**h["files"][1], "size": h["files"][1]["size"] + 1}]}, p),
    "name with a path": lambda h, p: ({**h, "files": [{**h["files"][0], "name": "../model.safetensors"},
                                                      h["files"][1]]}, p),
    "absolute name": lambda h, p: ({**h, "files": [{**h["files"][0], "name": "/tmp/x"}, h["files"][1]]}, p),
    "duplicate": lambda h, p: ({**h, "files": [h["files"][0], {**h["files"][0]}]},
                               p[:h["files"][0]["size"]] * 2),
    "bad version": lambda h, p: ({**h, "version": True}, p),
}


@pytest.mark.parametrize("lie", LIES)
def test_an_inconsistent_frame_is_refused_with_nothing_written_and_the_link_goes_on(
        tmp_path: Path, pipe: tuple[socket.socket, ...], lie: str) -> None:
    src = publish(tmp_path / "learner", 2, size=600_000)  # more than one chunk
    root = tmp_path / "actor"
    header, payload = pack_weights(src, 2)
    old = publish(root, 1)  # what the actor holds already
    bad_header, bad_payload = LIES[lie](header, payload)
    for way in ("streamed", "whole"):
        if way == "whole":  # Ray's actors: the same checks on the payload in memory
            with pytest.raises(WeightsRefused):
                unpack_weights(bad_header, bad_payload, root)
        else:
            sender = send(pipe[0], bad_header, bad_payload)
            with pytest.raises(WeightsRefused):
                receive(pipe[1], root)
            sender.join()
        assert sorted(p.name for p in root.iterdir()) == ["v1"] and same_files(old, root / "v1")
    sender = send(pipe[0], header, payload)  # the connection is in step: the next frame arrives whole
    assert same_files(src, receive(pipe[1], root))
    sender.join()


def test_a_connection_lost_mid_payload_leaves_nothing_behind(tmp_path: Path, pipe: tuple[socket.socket, ...]) -> None:
    src = publish(tmp_path / "learner", 3, size=900_000)
    header, payload = pack_weights(src, 3)
    head = json.dumps(header).encode()

    def cut() -> None:  # the frame claims the whole payload, half of it comes, then the peer hangs up
        pipe[0].sendall(PREFIX.pack(MAGIC, len(head), len(payload)) + head + payload[: len(payload) // 2])
        pipe[0].shutdown(socket.SHUT_WR)
    sender = threading.Thread(target=cut, daemon=True)
    sender.start()
    with pytest.raises(FrameError) as err:
        receive(pipe[1], tmp_path / "actor")
    assert not isinstance(err.value, WeightsRefused)  # the link is gone, not merely the frame
    sender.join()
    assert list((tmp_path / "actor").iterdir()) == []


ACTOR = """
import sys, time
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.tcp_actor import TcpActorClient
port, key, folder, name, last = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
client = TcpActorClient(("127.0.0.1", port), key, name, Outbox(folder + "/outbox"), weights_dir=folder + "/weights")
client.connect()
print("ready", flush=True)
deadline = time.monotonic() + 60
while not any(v == last for v, _ in client.received_versions) and time.monotonic() < deadline:
    time.sleep(0.01)
print("got", [v for v, _ in client.received_versions], len(client.refused_weights), flush=True)
"""


def test_a_pushed_version_reaches_two_actor_processes_and_a_tampered_one_is_refused(tmp_path: Path) -> None:
    learner = tmp_path / "learner"
    for version in (1, 2):
        publish(learner, version, size=4 << 20)
    packer = WeightsPacker(learner)
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    procs = [subprocess.Popen([sys.executable, "-c", ACTOR, str(server.address[1]), KEY.hex(), str(tmp_path / f"a{i}"),
                               f"a{i}", "2"], stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        while server.num_actors < 2:
            time.sleep(0.01)
        header, parts = packer.frame(1)
        tampered = {**header, "files": [{**f, "sha256": "0" * 64} for f in header["files"]]}
        server.broadcast(1, tampered, parts)
        deadline = time.monotonic() + 30
        while any(link.sent_version < 1 for link in server.links.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        server.broadcast(2, *packer.frame(2))
        outs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        server.close()
        for proc in procs:
            proc.kill()
    for i, out in enumerate(outs):
        assert out.strip() == "got [2] 1", out  # v1 refused (its hashes lie), v2 taken over the same connection
        weights = tmp_path / f"a{i}" / "weights"
        assert sorted(p.name for p in weights.iterdir()) == ["v2"] and same_files(learner / "v2", weights / "v2")
