"""Actors on other machines: transitions over TCP with a shared secret, acknowledged once checkpointed.

The learner listens on a TCP port (optionally TLS); an actor (a simulated one, or the ROS policy node of a
real robot) connects, proves it knows the run's secret (robot_rl.learners.wire), is told how far the
learner's checkpoint holds its batches, re-sends the rest from its :class:`~robot_rl.learners.delivery.Outbox`
and then streams new batches. The learner acknowledges batches only after a checkpoint holds them
(:meth:`TcpTransitionServer.acknowledge`), so a learner killed at any moment loses nothing and stores
nothing twice. Payloads are safetensors bytes; a malformed, oversized or out-of-order batch drops that
connection (the actor re-sends after reconnecting) and never stops the learner; a wrong secret is refused
and logged with the peer's address.

Same interface as the one-machine socket (:class:`~robot_rl.learners.transport.TransitionReceiver`), plus
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.buffers import decode_transitions
from robot_rl.learners.delivery import Inbox, Outbox
from robot_rl.learners.wire import (
    DEFAULT_MAX_PAYLOAD,
    AuthError,
    FrameError,
    client_handshake,
    recv_frame,
    send_frame,
    server_handshake,
)

log = logging.getLogger(__name__)


@dataclass
class ActorLink:
    """One connected actor, as the learner sees it."""

    actor: str
    info: dict[str, Any]
    """What the actor said in its hello (host, task, embodiment...)."""
    sock: socket.socket
    peer: str
    steps: int = 0
    batches: int = 0
    last_seen: float = field(default_factory=time.time)


class TcpTransitionServer:
    """Learner end: a TCP listener many actors on many hosts connect to."""

    def __init__(self, key: bytes, inbox: Inbox | None = None, host: str = "0.0.0.0", port: int = 0,
                 tls: ssl.SSLContext | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self.key, self.tls, self.max_payload = key, tls, max_payload
        self.inbox = inbox or Inbox()
        self._listener = socket.create_server((host, port))
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self.links: dict[str, ActorLink] = {}
        self.refused: list[str] = []
        """Why connections were refused or dropped (wrong secret, malformed batch...), with the peer."""
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
                send_frame(sock, {"type": "resume", "mark": self.inbox.mark(actor)})
                self.links[actor] = ActorLink(actor, hello, sock, peer)
            if old is not None:  # the same actor id again (replaced, reconnected): the old link is dead
                old.sock.close()
        except (AuthError, FrameError, ssl.SSLError, OSError) as exc:
            self._note(f"refused {peer}: {exc}")
            raw.close()

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
        readable, _, _ = select.select([link.sock for link in links], [], [], timeout)
        for link in links:
            if link.sock not in readable:
                continue
            try:
                while True:
                    header, payload = recv_frame(link.sock, self.max_payload)
                    oldest = header.get("oldest")
                    if header["type"] != "batch" or not isinstance(header.get("seq"), int) \
                            or not (oldest is None or isinstance(oldest, int)):
                        raise FrameError(f"unexpected {header['type']!r} message")
                    batch = decode_transitions(payload)
                    if self.inbox.accept(link.actor, header["seq"], oldest):
                        out.extend(batch)
                        link.steps += len(batch)
                    link.batches += 1
                    link.last_seen = time.time()
                    pending = link.sock.pending() if isinstance(link.sock, ssl.SSLSocket) else 0
                    if not pending and not select.select([link.sock], [], [], 0)[0]:
                        break
            except (FrameError, SpecError, ValueError, OSError) as exc:
                self._drop(link, f"dropped {link.actor} ({link.peer}): {exc}")
        return out

    def _drop(self, link: ActorLink, why: str) -> None:
        self._note(why)
        with self._lock:
            if self.links.get(link.actor) is link:
                del self.links[link.actor]
        link.sock.close()

    def acknowledge(self, marks: dict[str, int]) -> None:
        """After a checkpoint: tell each connected actor how far its batches are safe (it forgets them)."""
        with self._lock:
            links = [link for actor, link in self.links.items() if actor in marks]
        for link in links:
            try:
                send_frame(link.sock, {"type": "ack", "seq": marks[link.actor]})
            except OSError as exc:
                self._drop(link, f"dropped {link.actor} ({link.peer}) while acknowledging: {exc}")

    def status(self) -> list[dict[str, Any]]:
        """Per connected actor: id, peer, what it said about itself, steps and batches received, last seen."""
        with self._lock:
            return [{"actor": link.actor, "peer": link.peer, **link.info, "steps": link.steps,
                     "batches": link.batches, "last_seen": link.last_seen} for link in self.links.values()]

    def close(self) -> None:
        """Stop listening and disconnect every actor."""
        self._closed = True
        with contextlib.suppress(OSError):  # wakes the accept thread (closing alone leaves the port bound)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        with self._lock:
            for link in self.links.values():
                link.sock.close()
            self.links.clear()


class TcpActorClient:
    """Actor end: a TransitionSender whose batches survive disconnects, learner kills and actor restarts."""

    def __init__(self, address: tuple[str, int], key: bytes, actor: str, outbox: Outbox,
                 info: dict[str, Any] | None = None, tls: ssl.SSLContext | None = None,
                 server_hostname: str | None = None) -> None:
        self.address, self.key, self.actor, self.outbox = address, key, actor, outbox
        self.info, self.tls, self.server_hostname = dict(info or {}), tls, server_hostname
        self._sock: socket.socket | None = None
        self.reconnects = 0

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
            self.outbox.resume_after(header["mark"])
            for seq, payload in self.outbox.pending():
                send_frame(sock, {"type": "batch", "seq": seq, "oldest": self.outbox.oldest}, payload)
        except BaseException:
            raw.close()
            raise
        self._sock = sock
        self.reconnects += 1

    def send(self, transitions: Sequence[Transition]) -> None:
        """Keep the batch on disk, then send it (if the learner is away, it goes out after :meth:`connect`)."""
        seq = self.outbox.add(transitions)
        if self._sock is None:
            return
        try:
            send_frame(self._sock, {"type": "batch", "seq": seq, "oldest": self.outbox.oldest}, self.outbox.read(seq))
        except OSError:
            self._sock = None
        self.poll_acks()

    def poll_acks(self, timeout: float = 0.0) -> int:
        """Apply the learner's acknowledgements that arrived (waiting up to ``timeout``); returns the acked mark."""
        while self._sock is not None and select.select([self._sock], [], [], timeout)[0]:
            try:
                header, _ = recv_frame(self._sock, max_payload=0)
            except (FrameError, OSError):
                self._sock = None
                break
            if header["type"] == "ack" and isinstance(header.get("seq"), int):
                self.outbox.ack(header["seq"])
            timeout = 0.0
        return self.outbox.acked

    @property
    def connected(self) -> bool:
        """Whether a learner connection is up."""
        return self._sock is not None

    def close(self) -> None:
        """Disconnect; unacknowledged batches stay in the outbox for the next run of this actor."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
