"""Fault drills of the fleet: actors and learner through kills, a partition, a slow link, a foreign config.

Every drill checks the delivery invariant: the count and multiset hash of the steps the actors produced
(their outbox journals) equal those the learner stored, nothing lost and nothing twice, and reports what it
measured with ``record_fault``. The learner's SIGKILL with a replaced actor over real processes is
tests/test_fleet_learner.py (which records it too); a whole Ray worker node stopped is the slow
tests/test_drills_fleet_ray.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from helpers.fuzz import record_fault

from robot_rl.core.transition import Transition
from robot_rl.fleet import delivery
from robot_rl.fleet.delivery import (
    JOURNAL_FILE,
    Inbox,
    Outbox,
    journal_totals,
    multiset_hash,
    read_journal,
    transition_digest,
)
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.tcp_transport import TcpTransitionServer

KEY = b"d" * 32


def step(actor: int, k: int) -> Transition:
    obs = {"state": np.array([actor, k], np.float32)}
    return Transition(observation=obs, next_observation=obs, action=np.array([actor, k % 7], np.float32),
                      reward=0.0, terminated=False, truncated=False, episode_id=actor, step=k)


def wait_for(cond: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll ``cond`` until true (generous deadline); returns the seconds it took."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < seconds, f"timed out after {seconds} s waiting for {what}"
        time.sleep(0.02)
    return time.monotonic() - start


# ------------------------------------------------------------------------------ the outbox journal's rotation
def test_the_outbox_journal_stays_bounded_over_many_acknowledged_batches(tmp_path: Path) -> None:
    limit = 4096
    box = Outbox(tmp_path / "a", journal=True, journal_max_bytes=limit)
    inbox, stored = Inbox(), list[str]()
    sizes = []
    for k in range(600):
        batch = [step(0, 5 * k + j) for j in range(5)]
        seq = box.add(batch)
        if inbox.accept("a", seq):
            stored.extend(transition_digest(t) for t in batch)
        if k % 3 == 2:  # the learner checkpoints every third batch
            box.ack(inbox.checkpoint_done()["a"])
        sizes.append((tmp_path / "a" / JOURNAL_FILE).stat().st_size)
    line = len((tmp_path / "a" / JOURNAL_FILE).read_text().splitlines()[-1]) + 1
    unbounded = sizes[-1] if max(sizes) <= limit else None
    assert unbounded is None, "the journal never rotated"
    assert max(sizes) <= limit + 3 * line + 200, (max(sizes), limit, line)  # limit + the unacknowledged + summary
    assert journal_totals(tmp_path / "a") == (3000, multiset_hash(stored))
    with pytest.raises(ValueError, match="compacted"):  # no silent partial list once compacted
        read_journal(tmp_path / "a")
    # a restarted actor on the same folder keeps the totals and journals on
    again = Outbox(tmp_path / "a", journal=True, journal_max_bytes=limit)
    again.resume_after(inbox.mark("a"))  # what the handshake does
    seq = again.add([step(0, 3000)])
    assert inbox.accept("a", seq)
    stored.append(transition_digest(step(0, 3000)))
    assert journal_totals(tmp_path / "a") == (3001, multiset_hash(stored))
    record_fault("fleet: actor outbox journal growth (3000 steps, 600 batches)", happened="rotated",
                 recovery_s=None, lost="nothing", robot="n/a", max_journal_bytes=max(sizes), limit_bytes=limit)


class Killed(BaseException):
    """A SIGKILL at a chosen point (BaseException: nothing in the outbox catches it)."""


@pytest.mark.parametrize("where", ["after the batch files went, before the rotation", "before the rename",
                                   "after the rename"])
def test_a_kill_during_rotation_loses_nothing_and_stores_nothing_twice(tmp_path: Path, where: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "a"
    box = Outbox(folder, journal=True, journal_max_bytes=1500)
    inbox, stored, produced = Inbox(), list[str](), list[str]()
    k = 0

    def produce(n: int) -> None:
        nonlocal k
        for _ in range(n):
            batch = [step(0, k + j) for j in range(3)]
            k += 3
            produced.extend(transition_digest(t) for t in batch)
            seq = box.add(batch)
            if inbox.accept("a", seq):
                stored.extend(transition_digest(t) for t in batch)

    produce(20)
    box.ack(inbox.checkpoint_done()["a"])  # rotates once
    produce(20)
    real_replace = os.replace

    def kill_at_rename(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == JOURNAL_FILE:
            if where == "after the rename":
                real_replace(src, dst)
            raise Killed(where)
        real_replace(src, dst)

    marks = inbox.checkpoint_done()
    if where.startswith("after the batch files"):
        monkeypatch.setattr(Outbox, "compact_journal", lambda self: (_ for _ in ()).throw(Killed(where)))
    else:
        monkeypatch.setattr(delivery.os, "replace", kill_at_rename)
    with pytest.raises(Killed):
        box.ack(marks["a"])
    monkeypatch.undo()
    # the replacement actor: same folder; the learner's checkpoint mark comes with the handshake
    box = Outbox(folder, journal=True, journal_max_bytes=1500)
    assert not list(folder.glob(".*.tmp"))
    box.resume_after(inbox.mark("a"))
    produce(20)
    for seq, _payload in box.pending():  # re-sends after reconnecting: skipped or stored once
        if inbox.accept("a", seq):
            raise AssertionError(f"batch {seq} re-sent after its acknowledgement was stored again")
    box.ack(inbox.checkpoint_done()["a"])
    assert journal_totals(folder) == (len(produced), multiset_hash(stored))
    assert len(stored) == len(produced) == 180 and multiset_hash(stored) == multiset_hash(produced)
    record_fault(f"fleet: actor killed during journal rotation ({where})", happened="restarted", recovery_s=None,
                 lost="nothing", robot="n/a")


def test_a_torn_journal_line_of_a_killed_actor_is_repaired_on_restart(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "a", journal=True)
    box.add([step(0, 0)])
    box.add([step(0, 1)])
    with (tmp_path / "a" / JOURNAL_FILE).open("a") as f:  # killed while journaling a third batch
        f.write('{"seq": 3, "steps": ["ab')
    (tmp_path / "a" / f"{3:012d}.safetensors").write_bytes(delivery.encode_transitions([step(0, 2)]))
    again = Outbox(tmp_path / "a", journal=True)  # re-journals batch 3, appends after a clean line end
    again.add([step(0, 3)])
    assert read_journal(tmp_path / "a") == [transition_digest(step(0, k)) for k in range(4)]


# ------------------------------------------------------------------------------ a partition and a slow link
class Proxy:
    """A TCP relay between actors and the learner that can cut all traffic (partition) or slow it down.

    Cut: every byte either way is dropped and new connections are closed at once; healing resets the cut
    connections (as a partition longer than TCP's patience leaves them), so both ends must reconnect.
    Slow: each chunk of at most ``chunk`` bytes waits ``latency_s`` and the rate is capped at ``rate`` B/s.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.cut = threading.Event()
        self.latency_s, self.rate, self.chunk = 0.0, 0.0, 65536
        self.dropped_bytes = 0
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self.pairs.append((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = src.recv(self.chunk)
                if not data:
                    break
                if self.cut.is_set():
                    self.dropped_bytes += len(data)
                    continue
                if self.latency_s:
                    time.sleep(self.latency_s)
                if self.rate:
                    time.sleep(len(data) / self.rate)
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def partition(self) -> None:
        self.cut.set()

    def heal(self) -> None:
        """End the partition: the connections it cut are reset, new ones pass."""
        with self._lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        self.cut.clear()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.heal()


class Learner(threading.Thread):
    """An in-process learner loop: receive, store, checkpoint (acknowledge) every ``every_s``."""

    def __init__(self, server: TcpTransitionServer, every_s: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.server, self.every_s = server, every_s
        self.stored: list[str] = []
        self.longest_receive_s = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.done.is_set():
            t0 = time.monotonic()
            got = self.server.receive(timeout=0.05)
            self.longest_receive_s = max(self.longest_receive_s, time.monotonic() - t0)
            self.stored.extend(transition_digest(t) for t in got)
            if time.monotonic() - last > self.every_s or self.server.flush_requested:
                self.server.acknowledge(self.server.inbox.checkpoint_done())
                last = time.monotonic()


class Actor(threading.Thread):
    """An actor loop: a 3-step batch every 10 ms through its journaled outbox, until stopped."""

    def __init__(self, i: int, address: tuple[str, int], folder: Path) -> None:
        super().__init__(daemon=True)
        self.i = i
        self.client = TcpActorClient(address, KEY, f"a{i}", Outbox(folder / f"a{i}", journal=True))
        self.folder = folder / f"a{i}"
        self.stop = threading.Event()
        self.k = 0
        self.longest_send_s = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.client.send([step(self.i, self.k + j) for j in range(3)])
            self.longest_send_s = max(self.longest_send_s, time.monotonic() - t0)
            self.k += 3
            time.sleep(0.01)

    def last_seq(self) -> int:
        with self.client._lock:
            return self.client.outbox.next_seq - 1


@contextlib.contextmanager
def fleet(tmp_path: Path, n: int = 2) -> Iterator[tuple[Proxy, Learner, list[Actor]]]:
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    proxy = Proxy(server.address)
    learner = Learner(server)
    learner.start()
    actors = [Actor(i, proxy.address, tmp_path) for i in range(n)]
    try:
        for a in actors:
            a.client.connect()
            a.start()
        yield proxy, learner, actors
    finally:
        for a in actors:
            a.stop.set()
        learner.done.set()
        proxy.close()
        server.close()


def check_invariant(learner: Learner, actors: list[Actor]) -> tuple[int, int]:
    """Stop the actors, drain their outboxes; assert every produced step is stored once. (produced, dup batches)"""
    for a in actors:
        a.stop.set()
        a.join(timeout=30)
    for a in actors:
        assert a.client.wait_acked(timeout=60), f"actor {a.i}: outbox never drained ({a.client.queued} left)"
    produced = [journal_totals(a.folder) for a in actors]
    count = sum(c for c, _ in produced)
    assert len(learner.stored) == count, (len(learner.stored), count)  # nothing lost, nothing twice
    expected = multiset_hash([d for a in actors for d in read_journal(a.folder)])
    assert multiset_hash(learner.stored) == expected
    assert count == sum(a.k for a in actors)
    return count, learner.server.inbox.duplicates


@pytest.mark.slow
def test_a_network_partition_heals_actors_reconnect_and_every_step_arrives_once(tmp_path: Path) -> None:
    with fleet(tmp_path) as (proxy, learner, actors):
        wait_for(lambda: len(learner.stored) > 150, 30, "steps to flow")
        proxy.partition()
        cut_at = time.monotonic()
        wait_for(lambda: proxy.dropped_bytes > 0 and time.monotonic() - cut_at > 2.0, 30, "a 2 s partition")
        stored_during = len(learner.stored)
        time.sleep(0.3)
        assert len(learner.stored) == stored_during  # nothing passes a partition
        backlog = [a.client.queued for a in actors]
        proxy.heal()
        healed_at = time.monotonic()
        marks = {a.client.actor: a.last_seq() for a in actors}  # produced up to the heal: must all be stored
        recovery = wait_for(lambda: all(learner.server.inbox.checkpointed.get(k, 0) >= v for k, v in marks.items()),
                            60, "the backlog stored and acknowledged after the heal")
        reconnects = [a.client.reconnects for a in actors]
        count, duplicates = check_invariant(learner, actors)
        send_stall = max(a.longest_send_s for a in actors)
    assert all(r >= 2 for r in reconnects), reconnects  # each actor reconnected
    assert min(backlog) > 0
    record_fault("fleet: network partition between actors and learner (2 s)", happened="reconnected",
                 recovery_s=round(recovery, 3), lost="nothing", robot="n/a", steps=count,
                 resent_batches_skipped=duplicates, dropped_bytes=proxy.dropped_bytes, backlog_batches=backlog,
                 longest_actor_send_s=round(send_stall, 3), partition_s=round(healed_at - cut_at, 3))


def test_a_slow_link_delays_but_loses_nothing_and_the_actors_keep_their_pace(tmp_path: Path) -> None:
    with fleet(tmp_path) as (proxy, learner, actors):
        wait_for(lambda: len(learner.stored) > 60, 30, "steps to flow")
        proxy.latency_s, proxy.rate, proxy.chunk = 0.05, 20_000.0, 512  # 50 ms per 512 B, 20 kB/s
        slow_at = time.monotonic()
        base = len(learner.stored)
        wait_for(lambda: time.monotonic() - slow_at > 2.0, 10, "2 s of slow link")
        slow_steps = len(learner.stored) - base
        produced_slow = sum(a.k for a in actors)
        proxy.latency_s, proxy.rate, proxy.chunk = 0.0, 0.0, 65536
        back_at = time.monotonic()
        marks = {a.client.actor: a.last_seq() for a in actors}
        catch_up = wait_for(lambda: all(learner.server.inbox.checkpointed.get(k, 0) >= v for k, v in marks.items()),
                            60, "the backlog after the link recovered")
        count, duplicates = check_invariant(learner, actors)
        send_stall = max(a.longest_send_s for a in actors)
        receive_stall = learner.longest_receive_s
    assert slow_steps < produced_slow  # the link really was the bottleneck
    # A frame trickling in never holds the learner's loop (it reads ahead whole frames): before, one receive()
    # waited for the whole trickle; 1.5 s leaves room for a loaded CI machine (0.06-0.14 s unloaded)
    assert receive_stall < 1.5
    assert time.monotonic() - back_at < 120
    record_fault("fleet: slow link between actors and learner (50 ms/512 B, 20 kB/s, 2 s)", happened="delayed",
                 recovery_s=round(catch_up, 3), lost="nothing", robot="n/a", steps=count,
                 resent_batches_skipped=duplicates, longest_actor_send_s=round(send_stall, 3),
                 longest_learner_receive_s=round(receive_stall, 3), steps_through_slow_link=slow_steps)


# ------------------------------------------------------------------------------ kill -9 of each actor mid-run
ACTOR = """
import sys, time
import numpy as np
from robot_rl.core.transition import Transition
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.reconnect import retry
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.wire import FrameError
port, key, folder = int(sys.argv[1]), bytes.fromhex(sys.argv[2]), sys.argv[3]
actor, gen = int(sys.argv[4]), int(sys.argv[5])

def step(ep, k):
    obs = {"state": np.array([ep, k], np.float32)}
    return Transition(observation=obs, next_observation=obs, action=np.array([ep, k % 7], np.float32),
                      reward=0.0, terminated=False, truncated=False, episode_id=ep, step=k)

client = TcpActorClient(("127.0.0.1", port), key, f"a{actor}", Outbox(folder, journal=True))
retry(client.connect, 30, (OSError, FrameError))
for k in range(0, 600, 3):  # episode ids per generation: a replacement's steps are its own
    client.send([step(100 * actor + gen, k + j) for j in range(3)])
    time.sleep(0.005)
sys.exit(0 if client.wait_acked(60) else 4)
"""


def test_kill_9_of_each_actor_mid_run_loses_nothing_and_stores_nothing_twice(tmp_path: Path) -> None:
    """Both actors (real processes) SIGKILLed mid-stream, one after the other, each replaced by a process with
    the same id and outbox folder; the learner keeps serving."""
    server = TcpTransitionServer(KEY, host="127.0.0.1")
    learner = Learner(server, every_s=0.2)
    learner.start()

    def actor(i: int, gen: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", ACTOR, str(server.address[1]), KEY.hex(),
                                 str(tmp_path / f"a{i}"), str(i), str(gen)])

    def streamed(name: str) -> bool:
        return len(read_journal(tmp_path / name)) > 90

    def delivered(name: str, mark: int) -> bool:
        return server.inbox.received.get(name, 0) > mark

    procs = [actor(0, 0), actor(1, 0)]
    recovery: list[float] = []
    try:
        for i in (0, 1):
            name = f"a{i}"
            wait_for(partial(streamed, name), 60, f"actor {i} to stream")
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait()
            killed_at = time.monotonic()
            mark = server.inbox.received.get(name, 0)
            procs[i] = actor(i, 1)
            wait_for(partial(delivered, name, mark), 60, f"actor {i}'s replacement to deliver")
            recovery.append(time.monotonic() - killed_at)  # kill -> replacement up, re-sent, new batches in
        for p in procs:
            assert p.wait(timeout=120) == 0
        produced = read_journal(tmp_path / "a0") + read_journal(tmp_path / "a1")
        wait_for(lambda: len(learner.stored) >= len(produced), 30, "the last batches")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        learner.done.set()
        server.close()
    assert sorted(learner.stored) == sorted(produced)  # count and hash: nothing lost, nothing twice
    assert len(set(produced)) == len(produced) > 1200
    for i in (0, 1):
        record_fault(f"fleet: actor {i} SIGKILL mid-stream (replaced, same id and outbox)", happened="restarted",
                     recovery_s=round(recovery[i], 3), lost="nothing", robot="n/a", steps=len(produced),
                     resent_batches_skipped=server.inbox.duplicates)


# ------------------------------------------------------------------------------ a learner of another config
QUAD = "robot_rl/QuadHover-RealStandIn-v0"
TRACK = "robot_rl/QuadTrack-RealStandIn-v0"


def online_config(*overrides: str):  # type: ignore[no-untyped-def]
    from robot_rl.core.config import load_config
    from robot_rl.learners.online_config import OnlineConfig

    return load_config(OnlineConfig, None, [
        f"actor.env_id={QUAD}", "learner.algorithm=residual", "learner.residual.base=expert",
        "learner.residual.reward=env", "learner.residual.sac.hidden=32", "learner.residual.sac.num_critics=2",
        "learner.residual.sac.batch_size=16", "learner.device=cpu", "learner.residual.warmup_steps=10", *overrides])


def folder_digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


OTHERS = {"algorithm": "learner.algorithm=rlpd", "algorithm-bc": "learner.algorithm=hg_dagger",
          "observation-keys": "learner.residual.state_keys=[wrist]", "task-action-space": f"actor.env_id={TRACK}"}


def test_a_learner_of_another_config_on_the_same_run_folder_is_refused_and_mixes_nothing_in(tmp_path: Path) -> None:
    from robot_rl.learners.learner_process import OnlineLearner

    run = tmp_path / "run"
    first = OnlineLearner(online_config(), run)
    obs = {"state": np.zeros(3, np.float32)}
    first.add([Transition(obs, obs, np.zeros(4, np.float32), 0.0, k == 29, False, 0, k,
                          base_action=np.zeros(4, np.float32)) for k in range(30)])
    first.train(3)
    first.checkpoint()
    before = folder_digest(run / "checkpoint")
    for name, other in OTHERS.items():
        started = time.monotonic()
        with pytest.raises(ValueError, match=r"holds a run of another config .* here\); restart with the run's own"):
            OnlineLearner(online_config(other), run)
        refused_s = time.monotonic() - started
        assert folder_digest(run / "checkpoint") == before, name  # nothing cut, written or mixed into it
        record_fault(f"fleet: learner restarted with another config ({name}: {other})", happened="refused",
                     recovery_s=round(refused_s, 3), lost="nothing", robot="n/a")
    again = OnlineLearner(online_config("learner.residual.sac.lr=0.0001"), run)  # a tuning change resumes
    assert again.resumed_from is not None and again.steps.total_added == 30
    grown = OnlineLearner(online_config(f"fleet.tasks=[{QUAD}, {TRACK}]"), run)  # an appended task resumes too
    assert grown.steps.total_added == 30
