"""Actors on other machines: transitions over TCP with a shared secret, acknowledged once checkpointed.

The learner listens on a TCP port (optionally TLS); an actor (a simulated one, or the ROS policy node of a
real robot) connects, proves it knows the run's secret (robot_rl.fleet.wire), is told how far the
learner's checkpoint holds its batches, re-sends the rest from its :class:`~robot_rl.fleet.delivery.Outbox`
and then streams new batches. The learner acknowledges batches only after a checkpoint holds them
(:meth:`TcpTransitionServer.acknowledge`), so a learner killed at any moment loses nothing and stores
nothing twice. Payloads are safetensors bytes; a malformed, oversized or out-of-order batch drops that
connection (the actor re-sends after reconnecting) and never stops the learner; a wrong secret is refused
and logged with the peer's address.

Weights go the other way on the same connection: the learner packs each published version once
(:func:`~robot_rl.fleet.wire.pack_weights`) and every actor's writer thread sends the newest one it has
not sent yet (a slow link skips versions instead of queueing them); the actor checks sizes and hashes and
writes ``v<N>/`` into its own weights folder, where the usual follower swaps it in between chunks.

Same interface as the one-machine socket (:class:`~robot_rl.fleet.transport.TransitionReceiver`), plus
per-actor bookkeeping for ``robot-rl online status``.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions
from robot_rl.fleet.delivery import Inbox, Outbox
from robot_rl.fleet.reconnect import Reconnect
from robot_rl.fleet.wire import (
    DEFAULT_MAX_PAYLOAD,
    AuthError,
    FrameError,
    client_handshake,
    recv_frame,
    send_frame,
    server_handshake,
    unpack_weights,
)

log = logging.getLogger(__name__)
MAX_WEIGHTS_BYTES = 4 * 1024 * 1024 * 1024
"""Largest weights frame an actor accepts (a 1B-parameter fp32 policy)."""


@dataclass
class ActorLink:
    """One connected actor, as the learner sees it; a writer thread sends its acknowledgements and weights."""

    actor: str
    info: dict[str, Any]
    """What the actor said in its hello (host, task, embodiment...)."""
    sock: socket.socket
    peer: str
    steps: int = 0
    batches: int = 0
    interventions: int = 0
    """Human-controlled steps received from this actor."""
    version: int = -1
    """Weights version the actor last reported acting with."""
    task: int = 0
    """The fleet task its steps come from."""
    last_seen: float = field(default_factory=time.time)
    joined: float = field(default_factory=time.time)
    ack: int | None = None
    weights: tuple[int, dict[str, Any], bytes] | None = None
    sent_version: int = 0
    alive: bool = True
    wake: threading.Condition = field(default_factory=threading.Condition)


class TcpTransitionServer:
    """Learner end: a TCP listener many actors on many hosts connect to."""

    def __init__(self, key: bytes, inbox: Inbox | None = None, host: str = "0.0.0.0", port: int = 0,
                 tls: ssl.SSLContext | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 welcome: dict[str, Any] | None = None) -> None:
        self.key, self.tls, self.max_payload = key, tls, max_payload
        self.welcome = dict(welcome or {})
        """Sent to every actor with the resume mark (the run's config, so a remote actor needs nothing else)."""
        self.inbox = inbox or Inbox()
        self._listener = socket.create_server((host, port))
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self.links: dict[str, ActorLink] = {}
        self._departed: dict[str, dict[str, Any]] = {}
        self.refused: list[str] = []
        """Why connections were refused or dropped (wrong secret, malformed batch...), with the peer."""
        self.flush_requested = False
        """An actor that is finishing asked for a checkpoint (the learner checkpoints soon and acknowledges)."""
        self._weights: tuple[int, dict[str, Any], bytes] | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tcp-accept", daemon=True)
        self._thread.start()

    def _note(self, why: str) -> None:
        self.refused.append(why)
        log.warning(why)

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, addr = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(raw, f"{addr[0]}:{addr[1]}"), daemon=True).start()

    def _admit(self, raw: socket.socket, peer: str) -> None:
        try:
            sock = self.tls.wrap_socket(raw, server_side=True) if self.tls is not None else raw
            hello = server_handshake(sock, self.key)
            actor = str(hello.get("actor") or peer)
            with self._lock:
                old = self.links.pop(actor, None)
                mark = self.inbox.mark(actor)
                received = self.inbox.received.get(actor, mark)
                send_frame(sock, {"type": "resume", "mark": mark, "received": received,
                                  "number": self.inbox.number(actor), **self.welcome})
                offered = self._weights if self._wants_weights(hello) else None
                link = ActorLink(actor, hello, sock, peer, weights=offered)
                self.links[actor] = link
            if old is not None:  # the same actor id again (replaced, reconnected): the old link is dead
                self._close_link(old)
            threading.Thread(target=self._write, args=(link,), name=f"tcp-writer-{actor}", daemon=True).start()
        except (AuthError, FrameError, ssl.SSLError, OSError) as exc:
            self._note(f"refused {peer}: {exc}")
            raw.close()

    def _write(self, link: ActorLink) -> None:
        """The link's writer: acknowledgements first, then the newest weights it has not sent."""
        while True:
            with link.wake:
                while link.alive and link.ack is None and (link.weights is None
                                                           or link.weights[0] <= link.sent_version):
                    link.wake.wait()
                if not link.alive:
                    return
                ack, link.ack = link.ack, None
                weights = link.weights if link.weights and link.weights[0] > link.sent_version else None
            try:
                if ack is not None:
                    send_frame(link.sock, {"type": "ack", "seq": ack})
                if weights is not None:
                    send_frame(link.sock, weights[1], weights[2])
                    link.sent_version = weights[0]
            except OSError as exc:
                self._drop(link, f"dropped {link.actor} ({link.peer}) while sending: {exc}")
                return

    @property
    def num_actors(self) -> int:
        """Actors currently connected."""
        with self._lock:
            return len(self.links)

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """New transitions from every actor (re-sent batches skipped), waiting up to ``timeout`` for the first."""
        with self._lock:
            links = list(self.links.values())
        out: list[Transition] = []
        if not links:
            if timeout:
                time.sleep(min(timeout, 0.05))
            return out
        try:
            readable, _, _ = select.select([link.sock for link in links], [], [], timeout)
        except (OSError, ValueError):  # a link closed under us; the next call sees the new set
            return out
        for link in links:
            if link.sock not in readable:
                continue
            try:
                while True:
                    header, payload = recv_frame(link.sock, self.max_payload)
                    self._handle(link, header, payload, out)
                    pending = link.sock.pending() if isinstance(link.sock, ssl.SSLSocket) else 0
                    if not pending and not select.select([link.sock], [], [], 0)[0]:
                        break
            except (FrameError, SpecError, ValueError, OSError) as exc:
                self._drop(link, f"dropped {link.actor} ({link.peer}): {exc}")
        return out

    def _handle(self, link: ActorLink, header: dict[str, Any], payload: bytes, out: list[Transition]) -> None:
        kind = header.get("type")
        link.last_seen = time.time()
        if isinstance(header.get("version"), int):
            link.version = header["version"]
        if kind == "flush":  # the actor is finishing: checkpoint soon so that it can leave with nothing pending
            self.flush_requested = True
            return
        oldest = header.get("oldest")
        if kind != "batch" or not isinstance(header.get("seq"), int) or not (oldest is None or isinstance(oldest, int)):
            raise FrameError(f"unexpected {kind!r} message")
        batch = decode_transitions(payload)
        if batch:
            link.task = batch[-1].task
        if self.inbox.accept(link.actor, header["seq"], oldest):
            out.extend(batch)
            link.steps += len(batch)
            link.interventions += sum(t.is_intervention for t in batch)
        link.batches += 1

    def _close_link(self, link: ActorLink) -> None:
        with link.wake:
            link.alive = False
            link.wake.notify_all()
        with contextlib.suppress(OSError):
            link.sock.shutdown(socket.SHUT_RDWR)
        link.sock.close()

    def _drop(self, link: ActorLink, why: str) -> None:
        self._note(why)
        with self._lock:
            if self.links.get(link.actor) is link:
                del self.links[link.actor]
                self._departed[link.actor] = {**self._row(link), "connected": False, "left": why}
        self._close_link(link)

    def acknowledge(self, marks: dict[str, int]) -> None:
        """After a checkpoint: tell each connected actor how far its batches are safe (it forgets them)."""
        self.flush_requested = False
        with self._lock:
            links = [link for actor, link in self.links.items() if actor in marks]
        for link in links:
            with link.wake:
                link.ack = marks[link.actor]
                link.wake.notify_all()

    def broadcast(self, version: int, header: dict[str, Any], payload: bytes) -> None:
        """Offer a packed weights version to every actor (and to those that join later); returns at once."""
        with self._lock:
            self._weights = (version, header, payload)
            links = list(self.links.values())
        for link in links:
            if self._wants_weights(link.info):
                with link.wake:
                    link.weights = self._weights
                    link.wake.notify_all()

    @staticmethod
    def _wants_weights(hello: dict[str, Any]) -> bool:
        """Whether an actor gets weights on this connection (Ray actors take them from Ray's object store)."""
        return hello.get("weights", "tcp") == "tcp"

    @staticmethod
    def _row(link: ActorLink) -> dict[str, Any]:
        return {**link.info, "actor": link.actor, "peer": link.peer, "steps": link.steps, "batches": link.batches,
                "interventions": link.interventions, "version": link.version, "task_index": link.task,
                "sent_version": link.sent_version, "last_seen": link.last_seen, "joined": link.joined,
                "connected": True}

    def status(self) -> list[dict[str, Any]]:
        """Every actor heard from since the learner started, connected ones first.

        Id, peer, what it said about itself, counters of this connection, weights version, last seen.
        """
        with self._lock:
            rows = [self._row(link) for link in self.links.values()]
            return rows + [r for actor, r in self._departed.items() if actor not in self.links]

    def close(self) -> None:
        """Stop listening and disconnect every actor."""
        self._closed = True
        with contextlib.suppress(OSError):  # wakes the accept thread (closing alone leaves the port bound)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            links = list(self.links.values())
            self.links.clear()
        for link in links:
            self._close_link(link)


class TcpActorClient:
    """Actor end: a TransitionSender whose batches survive disconnects, learner kills and actor restarts.

    A reader thread applies acknowledgements and writes received weights into ``weights_dir`` (when given);
    :meth:`send` reconnects (at most every ``RECONNECT_EVERY_S``) while the learner is away.
    """

    def __init__(self, address: tuple[str, int], key: bytes, actor: str, outbox: Outbox,
                 info: dict[str, Any] | None = None, tls: ssl.SSLContext | None = None,
                 server_hostname: str | None = None, weights_dir: str | Path | None = None,
                 version: Callable[[], int] | None = None,
                 resolve: Callable[[], tuple[str, int]] | None = None) -> None:
        self.address, self.key, self.actor, self.outbox = address, key, actor, outbox
        self.resolve = resolve
        """Where the learner serves now, asked before each reconnect (it may have moved); None: a fixed address."""
        self.info, self.tls, self.server_hostname = dict(info or {}), tls, server_hostname
        self.weights_dir = None if weights_dir is None else Path(weights_dir)
        self.version = version
        """What the actor acts with now (reported to the learner with every batch)."""
        self.welcome: dict[str, Any] = {}
        """What the learner said when we joined (its mark, the run's config)."""
        self.received_versions: list[tuple[int, float]] = []
        """(version, time it was on disk) of every weights version received."""
        self.refused_weights: list[str] = []
        self.reconnects = 0
        self._sock: socket.socket | None = None
        self._lock = threading.RLock()
        """Guards the outbox and the socket between the caller's thread and the reader."""
        self._acked = threading.Condition(self._lock)
        self._retry = Reconnect(self._resolve_and_connect, (OSError, FrameError, AuthError, LookupError),
                                on_error=lambda exc: log.info("learner %s:%s unreachable: %s", *self.address, exc))

    def connect(self, timeout: float = 10.0) -> None:
        """Connect, authenticate, learn the learner's mark and re-send everything it does not hold.

        Raises AuthError when the secret is refused, OSError/FrameError when the learner is unreachable.
        """
        raw = socket.create_connection(self.address, timeout=timeout)
        try:
            sock = (self.tls.wrap_socket(raw, server_hostname=self.server_hostname or self.address[0])
                    if self.tls is not None else raw)
            client_handshake(sock, self.key, {**self.info, "actor": self.actor}, timeout)
            header, _ = recv_frame(sock, max_payload=0)
            if header["type"] != "resume" or not isinstance(header.get("mark"), int):
                raise FrameError(f"expected the learner's resume mark, got {header}")
            sock.settimeout(None)
            with self._lock:
                self.welcome = header
                self.outbox.resume_after(header["mark"])
                # numbers the learner has received but not checkpointed are taken too: a replaced actor with an
                # empty outbox must not send new data under them (it would be skipped as a re-send)
                if isinstance(header.get("received"), int):
                    self.outbox.next_seq = max(self.outbox.next_seq, header["received"] + 1)
                for seq, payload in self.outbox.pending():
                    send_frame(sock, self._batch_header(seq), payload)
                self._sock = sock
        except BaseException:
            raw.close()
            raise
        self.reconnects += 1
        threading.Thread(target=self._read, args=(sock,), name=f"tcp-reader-{self.actor}", daemon=True).start()

    def _batch_header(self, seq: int) -> dict[str, Any]:
        header = {"type": "batch", "seq": seq, "oldest": self.outbox.oldest}
        if self.version is not None:
            header["version"] = int(self.version())
        return header

    def _read(self, sock: socket.socket) -> None:
        """Acknowledgements and weights from the learner, until the connection ends."""
        while True:
            try:
                header, payload = recv_frame(sock, max_payload=MAX_WEIGHTS_BYTES)
            except (FrameError, OSError):
                break
            if header.get("type") == "ack" and isinstance(header.get("seq"), int):
                with self._lock:
                    self.outbox.ack(header["seq"])
                    self._acked.notify_all()
            elif header.get("type") == "weights" and self.weights_dir is not None:
                try:
                    unpack_weights(header, payload, self.weights_dir)
                    self.received_versions.append((int(header["version"]), time.time()))
                except (FrameError, OSError) as exc:
                    self.refused_weights.append(str(exc))
                    log.warning("refused weights from the learner: %s", exc)
        with self._lock:
            if self._sock is sock:
                self._sock = None
            self._acked.notify_all()
        with contextlib.suppress(OSError):
            sock.close()

    def _resolve_and_connect(self) -> None:
        if self.resolve is not None:
            try:
                self.address = self.resolve()
            except Exception as exc:  # whatever the resolver raises means: not known now, try later
                raise LookupError(f"address unknown: {exc}") from exc
        self.connect(timeout=5.0)

    def _reconnect(self) -> bool:
        return self._sock is not None or self._retry.attempt()

    def send(self, transitions: Sequence[Transition]) -> None:
        """Keep the batch on disk, then send it (if the learner is away, it goes out after reconnecting)."""
        with self._lock:
            seq, payload = self.outbox.add_batch(transitions)
            if self._sock is None:
                self._reconnect()  # a successful reconnect re-sends the outbox, this batch included
                return
            try:
                send_frame(self._sock, self._batch_header(seq), payload)
            except OSError:
                self._sock = None

    def wait_acked(self, timeout: float) -> bool:
        """Ask the learner to checkpoint, wait until it acknowledges everything sent; False on timeout."""
        deadline = time.monotonic() + timeout
        asked = False
        with self._lock:
            while self.outbox.oldest is not None and time.monotonic() < deadline:
                if self._sock is None:
                    asked = False
                    if not self._reconnect():
                        self._acked.wait(0.1)
                        continue
                if not asked:
                    try:
                        send_frame(self._sock, {"type": "flush"})  # type: ignore[arg-type]
                        asked = True
                    except OSError:
                        self._sock = None
                        continue
                self._acked.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            return self.outbox.oldest is None

    def flush(self, timeout: float) -> bool:
        """End of an actor's run: :meth:`wait_acked` (same name as the one-machine sender's)."""
        return self.wait_acked(timeout)

    @property
    def queue(self) -> list[int]:
        """Unacknowledged batches (sequence numbers), for the actor's episode log."""
        return self.outbox.numbers()

    @property
    def queued(self) -> int:
        """Unacknowledged batches (on disk until the learner's checkpoint holds them)."""
        return len(self.queue)

    def poll_acks(self, timeout: float = 0.0) -> int:
        """Wait up to ``timeout`` for the next acknowledgement (the reader applies them); returns the acked mark."""
        with self._lock:
            if timeout and self.outbox.oldest is not None:
                self._acked.wait(timeout)
            return self.outbox.acked

    @property
    def connected(self) -> bool:
        """Whether a learner connection is up."""
        return self._sock is not None

    def close(self) -> None:
        """Disconnect; unacknowledged batches stay in the outbox for the next run of this actor."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
