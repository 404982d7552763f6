"""Sending on its own thread: an actor never waits for a learner that is busy training, and nothing is lost."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from robot_rl.core.transition import Transition
from robot_rl.fleet.transport import (
    BackgroundSender,
    ReconnectingSender,
    SocketTransitionServer,
    load_or_create_key,
    socket_address,
)


def step(i: int, pixels: bool = False) -> Transition:
    obs = {"x": np.array([i], np.float32)}
    if pixels:  # two 64x64 cameras, as the pixel policies see
        obs |= {f"image_{c}": np.full((64, 64, 3), i % 251, np.uint8) for c in ("front", "wrist")}
    return Transition(obs, obs, np.zeros(1, np.float32), 0.0, False, False, 0, i)


class Gate:
    """An inner sender that blocks until opened (a learner that is not reading), keeping what it got."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.open, self.got, self.fail_at, self.closed = threading.Event(), [], fail_at, False

    def send(self, transitions: Sequence[Transition]) -> None:
        self.open.wait()
        if self.fail_at is not None and self.fail_at in [t.step for t in transitions]:
            raise OSError("link broke")
        self.got += [t.step for t in transitions]

    def close(self) -> None:
        self.closed = True


def test_send_returns_at_once_while_the_inner_sender_blocks_and_keeps_order() -> None:
    gate = Gate()
    sender = BackgroundSender(gate, max_steps=1000)
    t0 = time.perf_counter()
    for i in range(0, 50, 5):
        sender.send([step(j) for j in range(i, i + 5)])
    assert time.perf_counter() - t0 < 0.5 and gate.got == []  # nothing delivered, yet acting went on
    assert sender.queued == 50
    assert not sender.flush(timeout=0.2)  # still blocked: flush says so instead of hanging
    gate.open.set()
    assert sender.flush(timeout=5.0) and gate.got == list(range(50)) and sender.queued == 0
    sender.close()
    assert gate.closed


def test_the_queue_is_bounded_by_waiting_not_by_dropping() -> None:
    gate = Gate()
    sender = BackgroundSender(gate, max_steps=10)
    sender.send([step(i) for i in range(10)])
    done = threading.Event()
    worker = threading.Thread(target=lambda: (sender.send([step(10)]), done.set()), daemon=True)
    worker.start()
    assert not done.wait(0.3)  # 10 steps queued: the next send waits for room
    gate.open.set()
    assert done.wait(5.0) and sender.flush(5.0) and gate.got == list(range(11))
    sender.close()
    with pytest.raises(ValueError, match="max_steps"):
        BackgroundSender(gate, max_steps=0)


def test_a_failure_on_the_thread_is_raised_on_the_acting_thread() -> None:
    gate = Gate(fail_at=3)
    gate.open.set()
    sender = BackgroundSender(gate, max_steps=100)
    sender.send([step(i) for i in range(5)])
    with pytest.raises(RuntimeError, match="link broke"):
        sender.flush(timeout=5.0)
    with pytest.raises(RuntimeError, match="link broke"):
        sender.send([step(5)])
    sender.close()


def test_camera_steps_reach_a_learner_that_reads_only_between_update_cycles(tmp_path: Path) -> None:
    """The measured case: ~50 kB steps fill the socket while the learner trains; acting must not stall."""
    key = load_or_create_key(tmp_path)
    server = SocketTransitionServer(socket_address(tmp_path), key)
    (tmp_path / "learner.json").write_text(json.dumps({"address": server.address}))
    sender = BackgroundSender(ReconnectingSender(tmp_path, limit=100_000), max_steps=1000)
    try:
        sender.send([step(0, pixels=True)])
        got = server.receive(timeout=5.0)  # connected
        n, blocking = 200, []
        for i in range(1, n, 5):  # the learner does not read: ~10 MB go out meanwhile
            t0 = time.perf_counter()
            sender.send([step(j, pixels=True) for j in range(i, min(i + 5, n))])
            blocking.append(time.perf_counter() - t0)
        assert max(blocking) < 0.1, max(blocking)  # a blocking send would wait here until the learner reads
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += server.receive(timeout=0.1)
        assert [t.step for t in got] == list(range(n))
        assert all(t.observation["image_wrist"].dtype == np.uint8 for t in got)
        assert sender.flush(timeout=5.0)
    finally:
        sender.close()
        server.close()
