"""Actor <-> learner transport on one machine: transitions stream in, versioned weights go out.

Owned by neither side: the learner serves, actors (simulated actors and the ROS policy node alike) connect,
and both find each other through the run folder. Kept behind two small interfaces
(:class:`TransitionSender` / :class:`TransitionReceiver`) so that a fleet transport across machines can
replace it. Any number of actors connect to one learner socket; payloads are safetensors bytes over
``multiprocessing.connection`` with an HMAC handshake (never pickle); a disconnected actor is noticed and
dropped; transitions go out in small batches during the episode (:class:`BatchingSender`), and an actor
whose learner is away keeps its steps in a bounded queue until it is back (:class:`ReconnectingSender`);
sending happens on its own thread, so acting never waits for a learner busy training (:class:`BackgroundSender`).

Run-folder rendezvous: ``learner.json`` (socket address, written atomically when the learner serves) and
``learner.key`` (the HMAC key, mode 0600, kept across restarts so actors reconnect to a restarted learner).

Weights go through a folder (:mod:`robot_rl.runtime.weights`). No torch import here.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Client, Connection, Listener, wait
from pathlib import Path
from typing import Any, Protocol

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions, encode_transitions
from robot_rl.fleet.reconnect import Reconnect
from robot_rl.fleet.security import check_secret_file

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Largest accepted transition batch (a corrupt length header must not allocate gigabytes)."""


class TransitionSender(Protocol):
    """Actor side: send transitions as they happen."""

    def send(self, transitions: Sequence[Transition]) -> None:
        """Send a batch (may be one step)."""

    def close(self) -> None:
        """Disconnect."""


class TransitionReceiver(Protocol):
    """Learner side: collect what the actors sent."""

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """Everything that arrived (waiting up to ``timeout`` seconds for the first batch)."""
        ...

    def close(self) -> None:
        """Stop accepting and disconnect everybody."""


class SocketTransitionServer:
    """Learner end: a local socket many actors connect to. ``address`` / ``authkey`` go to the actors."""

    def __init__(self, address: str | None = None, authkey: bytes | None = None) -> None:
        self.authkey = authkey or secrets.token_bytes(32)
        self._listener = Listener(address, family="AF_UNIX", authkey=self.authkey)
        self.address: str = str(self._listener.address)
        self._conns: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.dropped: list[str] = []
        """Why connections were dropped (disconnects, malformed payloads)."""
        self._thread = threading.Thread(target=self._accept, name="transition-accept", daemon=True)
        self._thread.start()

    @property
    def num_actors(self) -> int:
        """Actors currently connected."""
        with self._lock:
            return len(self._conns)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):  # closed, or a client failed the handshake
                if self._closed:
                    return
                continue
            except Exception:  # AuthenticationError: a stranger; keep serving the others
                continue
            with self._lock:
                self._conns.append(conn)

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """Transitions from every actor that sent something (waits up to ``timeout`` for the first)."""
        with self._lock:
            conns = list(self._conns)
        out: list[Transition] = []
        if not conns:
            return out
        for conn in wait(conns, timeout):
            assert isinstance(conn, Connection)
            while True:
                try:
                    out.extend(decode_transitions(conn.recv_bytes(MAX_MESSAGE_BYTES)))
                except (EOFError, OSError) as exc:
                    self._drop(conn, f"actor disconnected ({type(exc).__name__})")
                    break
                except SpecError as exc:
                    self._drop(conn, f"malformed batch refused: {exc}")
                    break
                if not conn.poll(0):
                    break
        return out

    def _drop(self, conn: Connection, why: str) -> None:
        self.dropped.append(why)
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)
        conn.close()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


# ---------------------------------------------------------------------------- rendezvous
MAX_SOCKET_PATH = 100
"""AF_UNIX paths longer than ~107 bytes are refused by the OS; longer run folders use a /tmp name."""


def socket_address(run: Path) -> str:
    """A fixed socket path per run folder, so a restarted learner is found at the same address."""
    path = str(run.resolve() / "learner.sock")
    if len(path) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"robot_rl_learner_{digest}.sock")


def load_or_create_key(run: Path) -> bytes:
    """The run's HMAC key (created once, readable by the owner only; InsecureFileError if others may read it)."""
    file = run / "learner.key"
    if file.is_file():
        return bytes.fromhex(check_secret_file(file, "shared secret").read_text(encoding="ascii").strip())
    key = secrets.token_bytes(32)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key.hex())
    return key


def announce(run: Path, address: str, extra: dict[str, Any] | None = None) -> None:
    """Write ``learner.json`` (the address actors connect to) atomically."""
    tmp = run / "learner.json.tmp"
    tmp.write_text(json.dumps({"address": address, **(extra or {})}), encoding="utf-8")
    os.replace(tmp, run / "learner.json")


def read_connection(run: Path, timeout: float = 60.0) -> tuple[str, bytes]:
    """(address, key) of the learner of ``run``, waiting up to ``timeout`` s for it to come up."""
    deadline = time.monotonic() + timeout
    info = run / "learner.json"
    while not info.is_file():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{run}: no learner came up within {timeout:.0f} s ({info} missing)")
        time.sleep(0.05)
    address = json.loads(info.read_text(encoding="utf-8"))["address"]
    return address, bytes.fromhex((run / "learner.key").read_text(encoding="ascii").strip())


SOCKET_SEND_BUFFER = 212_992
"""Bytes an actor's socket holds before its send waits for the learner to read (Linux's usual default).

Set explicitly because the host's default (``net.core.wmem_default``) varies: with a few MB a whole run can
sit in the socket, so an actor never waits for a paced learner (``learner.max_update_lag``) and the run's
updates per step depend on the host again."""


class SocketTransitionClient:
    """Actor end of :class:`SocketTransitionServer`."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self._conn = Client(address, family="AF_UNIX", authkey=authkey)
        with socket.socket(fileno=os.dup(self._conn.fileno())) as sock:  # the same socket, through a second fd
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER // 2)  # Linux doubles it

    @property
    def send_buffer(self) -> int:
        """The socket's send buffer in bytes, as the kernel reports it."""
        with socket.socket(fileno=os.dup(self._conn.fileno())) as sock:
            return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))

    def send(self, transitions: Sequence[Transition]) -> None:
        """Send a batch of transitions (safetensors bytes)."""
        if transitions:
            self._conn.send_bytes(encode_transitions(transitions))

    def close(self) -> None:
        """Disconnect (the learner notices and drops this actor)."""
        self._conn.close()


class ReconnectingSender:
    """A TransitionSender to the learner of a run folder that survives learner restarts.

    Steps wait in a bounded queue while the learner is away (the oldest are dropped beyond ``limit`` and
    counted) and go out, in order, once it is reachable again.
    """

    def __init__(self, run: str | Path, limit: int) -> None:
        self.run, self.limit = Path(run), limit
        self.queue: deque[Transition] = deque()
        self.dropped = 0
        """Steps dropped because the queue was full while the learner was away."""
        self.reconnects = 0
        self._client: SocketTransitionClient | None = None
        self._retry = Reconnect(self._open, (OSError, EOFError, TimeoutError, ValueError, KeyError))

    def _open(self) -> None:
        address, key = read_connection(self.run, timeout=0.0)
        self._client = SocketTransitionClient(address, key)
        self.reconnects += 1

    def _connect(self) -> bool:
        return self._client is not None or self._retry.attempt()

    @property
    def queued(self) -> int:
        """Steps waiting for the learner."""
        return len(self.queue)

    def send(self, transitions: Sequence[Transition]) -> None:
        """Queue, then send everything queued if the learner is reachable."""
        self.queue.extend(transitions)
        while len(self.queue) > self.limit:
            self.queue.popleft()
            self.dropped += 1
        if not self.queue or not self._connect():
            return
        batch = list(self.queue)
        try:
            assert self._client is not None
            self._client.send(batch)
        except (OSError, EOFError):
            self._client = None  # learner gone; keep the batch for later
            return
        self.queue.clear()

    def flush(self, timeout: float) -> bool:
        """Try to deliver what is queued for up to ``timeout`` seconds; True when nothing is left."""
        deadline = time.monotonic() + timeout
        while self.queue and time.monotonic() < deadline:
            self.send([])
            time.sleep(0.05)
        return not self.queue

    def close(self) -> None:
        """Disconnect."""
        if self._client is not None:
            self._client.close()
            self._client = None


class BackgroundSender:
    """Sends on its own thread, so the acting loop never waits for a learner on this machine that is training.

    A learner reads its sockets between update cycles; with camera frames a few batches fill the socket
    buffer, and a sender on the acting thread then blocks until the learner's next read (measured: a pixel
    actor's episodes went from 5 s to 35 s once the learner started updating). Here ``send`` only queues;
    the thread hands batches to ``inner`` in order. The acting loop waits only when more than ``max_steps``
    steps are still queued (the learner is far behind), which bounds the memory the queue takes. Meant for
    :class:`ReconnectingSender`, whose queue is in memory anyway; a TCP client journals each batch to disk
    before returning, a promise that a queue in front of it would break.
    """

    def __init__(self, inner: Any, max_steps: int) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps: must be >= 1, got {max_steps}")
        self.inner, self.max_steps = inner, max_steps
        self._batches: deque[list[Transition]] = deque()
        self._steps = 0
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self.error: BaseException | None = None
        """What the inner sender raised on the thread (re-raised by the next send, flush or close)."""
        self._thread = threading.Thread(target=self._run, name="transition-sender", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Steps not yet handed to the learner: this queue's and the inner sender's own."""
        with self._cond:
            mine = self._steps
        return mine + int(getattr(self.inner, "queued", 0))

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"sending transitions failed: {self.error}") from self.error

    def send(self, transitions: Sequence[Transition]) -> None:
        """Queue a batch (waits only while more than ``max_steps`` steps are queued)."""
        self._raise()
        if not transitions:
            return
        with self._cond:
            while self._steps >= self.max_steps and self.error is None and not self._closed:
                self._cond.wait(0.1)
            self._batches.append(list(transitions))
            self._steps += len(transitions)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._batches and not self._closed:
                    self._cond.wait()
                if not self._batches:
                    return
                batch = self._batches[0]
                self._busy = True
            try:
                self.inner.send(batch)
            except BaseException as exc:  # kept and re-raised on the acting thread
                with self._cond:
                    self.error, self._busy = exc, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._batches.popleft()
                self._steps -= len(batch)
                self._busy = False
                self._cond.notify_all()

    def _drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self._batches or self._busy) and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        self._raise()
        return True

    def flush(self, timeout: float) -> bool:
        """Hand over everything queued, then the inner sender's flush, within ``timeout`` s; True when done."""
        t0 = time.monotonic()
        if not self._drain(timeout):
            return False
        flush = getattr(self.inner, "flush", None)
        return True if flush is None else bool(flush(timeout=max(0.0, timeout - (time.monotonic() - t0))))

    def close(self) -> None:
        """Stop the thread (after what is queued has been handed over) and close the inner sender."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30.0)
        self.inner.close()


PENDING_LIMIT, SEND_QUEUE = 100_000, 1000
"""Defaults of :func:`local_sender`: steps kept while the learner is away; steps the sending thread may hold
before acting waits for it (~50 kB a step with two 64x64 cameras)."""


def local_sender(run: str | Path, pending_limit: int = PENDING_LIMIT, send_queue: int = SEND_QUEUE) -> BackgroundSender:
    """What an actor on the learner's machine sends through: the run folder's learner, from a thread of its own."""
    return BackgroundSender(ReconnectingSender(run, pending_limit), send_queue)


class BatchingSender:
    """Collects single steps and hands them to a sender every ``every`` steps (and on :meth:`flush`)."""

    def __init__(self, sender: TransitionSender, every: int) -> None:
        if every < 1:
            raise ValueError(f"every: must be >= 1, got {every}")
        self.sender, self.every = sender, every
        self.pending: list[Transition] = []

    def add(self, transition: Transition) -> None:
        """One step; sends when ``every`` have gathered."""
        self.pending.append(transition)
        if len(self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        """Send what has gathered (episode end)."""
        if self.pending:
            self.sender.send(self.pending)
            self.pending = []
