"""Actors on other machines: transitions over TCP with a shared secret, acknowledged once checkpointed.

The learner listens on a TCP port (optionally TLS); an actor (a simulated one, or the ROS policy node of a
real robot) connects, proves it knows the run's secret (robot_rl.fleet.wire), is told how far the
learner's checkpoint holds its batches, re-sends the rest from its :class:`~robot_rl.fleet.delivery.Outbox`
and then streams new batches. The learner acknowledges batches only after a checkpoint holds them
(:meth:`TcpTransitionServer.acknowledge`), so a learner killed at any moment loses nothing and stores
nothing twice. Payloads are safetensors bytes; a malformed, oversized or out-of-order batch drops that
connection (the actor re-sends after reconnecting) and never stops the learner (each link's reader thread
hands it whole frames, so a slow or stalled link never holds its loop either); a wrong secret is refused
and logged with the peer's address, and a peer whose handshakes keep failing is turned away unserved for a
while (:class:`~robot_rl.fleet.security.RefusalLimiter`). Plaintext on a non-loopback address is refused on
both ends unless explicitly allowed (:func:`~robot_rl.fleet.security.check_transport`).

Weights go the other way on the same connection: the learner maps and hashes each published version once
(:class:`~robot_rl.fleet.wire.WeightsPacker`; re-encoded once in float16 or bfloat16 with ``learner.push_dtype``,
:mod:`robot_rl.fleet.push_dtype`) and every actor's writer thread sends the newest one it has
not sent yet from those same mappings (a slow link skips versions instead of queueing them); the actor
hashes and writes the payload chunk by chunk as it arrives and renames the checked ``v<N>/`` into its own
weights folder (:func:`~robot_rl.fleet.wire.receive_weights`), where the usual follower swaps it in between
chunks.

The actor's end is :class:`robot_rl.fleet.tcp_actor.TcpActorClient`. The learner's end has the interface of
the one-machine socket (:class:`~robot_rl.fleet.transport.TransitionReceiver`), plus per-actor bookkeeping
for ``robot-rl online status``.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import decode_transitions
from robot_rl.fleet.delivery import Inbox
from robot_rl.fleet.security import RefusalLimiter, check_transport
from robot_rl.fleet.wire import (
    DEFAULT_MAX_PAYLOAD,
    HANDSHAKE_TIMEOUT_S,
    AuthError,
    FrameError,
    Payload,
    recv_frame,
    send_frame,
    server_handshake,
)

log = logging.getLogger(__name__)
FRAME_QUEUE = 64
"""Frames read ahead of the learner loop (beyond it the links' readers wait: the actors' sockets fill up)."""
FRAME_STALL_S = 10.0
"""An actor that goes silent this long in the middle of a frame is dropped (the learner's loop reads its frames)."""


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
    weights: tuple[int, dict[str, Any], Payload] | None = None
    sent_version: int = 0
    alive: bool = True
    wake: threading.Condition = field(default_factory=threading.Condition)


class TcpTransitionServer:
    """Learner end: a TCP listener many actors on many hosts connect to."""

    def __init__(self, key: bytes, inbox: Inbox | None = None, host: str = "127.0.0.1", port: int = 0,
                 tls: ssl.SSLContext | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD,
                 welcome: dict[str, Any] | None = None, allow_plaintext: bool | None = None,
                 limiter: RefusalLimiter | None = None, stall_s: float = FRAME_STALL_S,
                 handshake_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        """Listen on ``host:port`` (TLS with ``tls``).

        Without ``tls`` only a loopback ``host`` is allowed, unless ``allow_plaintext``
        (None: the ``ROBOT_RL_ALLOW_PLAINTEXT`` environment variable) opts out (InsecureTransportError otherwise).
        ``limiter``: the back-off of peers whose handshakes fail (default: 5 failures a minute block for a minute).
        ``stall_s``: an actor silent that long mid-frame is dropped (a half-open link must not hang :meth:`receive`).
        ``handshake_s``: a peer that has not finished the TLS and HMAC handshakes by then is refused.
        """
        check_transport(host, tls is not None, f"learner listening on {host}:{port}", allow_plaintext)
        self.key, self.tls, self.max_payload, self.stall_s = key, tls, max_payload, stall_s
        self.handshake_s = handshake_s
        self.limiter = limiter or RefusalLimiter()
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
        self._weights: tuple[int, dict[str, Any], Payload] | None = None
        self._frames: queue.Queue[tuple[ActorLink, dict[str, Any] | None, bytes | BaseException]] = \
            queue.Queue(FRAME_QUEUE)
        """Whole frames the links' reader threads received (a slow or stalled link never blocks the learner)."""
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="tcp-accept", daemon=True)
        self._thread.start()

    def _note(self, why: str) -> None:
        self.refused.append(why)
        log.warning(why)

    def _accept(self) -> None:
        failing = False
        while not self._closed:
            try:
                raw, addr = self._listener.accept()
            except OSError as exc:  # closed by close(), or e.g. out of file descriptors: the latter passes
                if self._closed:
                    return
                if not failing:
                    self._note(f"accepting a connection failed: {exc}; retrying")
                failing = True
                time.sleep(0.1)
                continue
            failing = False
            if self.limiter.blocked(addr[0]):  # turned away unread: no thread, no TLS, no handshake
                if self.limiter.turned_away.get(addr[0]) == 1:
                    self._note(f"refused {addr[0]} unserved: too many failed handshakes (blocked for a while)")
                raw.close()
                continue
            threading.Thread(target=self._admit, args=(raw, f"{addr[0]}:{addr[1]}"), daemon=True).start()

    def _admit(self, raw: socket.socket, peer: str) -> None:
        try:
            raw.settimeout(self.handshake_s)  # the TLS handshake too: a silent peer must not hold this thread forever
            sock = self.tls.wrap_socket(raw, server_side=True) if self.tls is not None else raw
            hello = server_handshake(sock, self.key, self.handshake_s)
            sock.settimeout(None)  # a link waits for frames (and sends weights) as long as it takes
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
            threading.Thread(target=self._read, args=(link,), name=f"tcp-reader-{actor}", daemon=True).start()
        except (AuthError, FrameError, ssl.SSLError, OSError) as exc:
            self._note(f"refused {peer}: {exc}")
            raw.close()
            host = peer.rpartition(":")[0]
            if self.limiter.failed(host):
                self._note(f"blocking {host} for {self.limiter.block_s:.0f} s after {self.limiter.max_failures} "
                           f"failed handshakes within {self.limiter.window_s:.0f} s")

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

    def _read(self, link: ActorLink) -> None:
        """The link's reader: whole frames onto the learner's queue, then why the link ended."""
        while link.alive:
            item: tuple[ActorLink, dict[str, Any] | None, bytes | BaseException]
            try:
                header, payload = recv_frame(link.sock, self.max_payload, self.stall_s)
                item = (link, header, payload)
            except (FrameError, ValueError, OSError) as exc:
                item = (link, None, exc)
            while link.alive:
                try:
                    self._frames.put(item, timeout=0.5)
                    break
                except queue.Full:
                    continue
            if item[1] is None:
                return

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """New transitions from every actor (re-sent batches skipped), waiting up to ``timeout`` for the first."""
        out: list[Transition] = []
        try:
            item = self._frames.get(timeout=timeout) if timeout else self._frames.get_nowait()
        except queue.Empty:
            return out
        while True:
            link, header, payload = item
            if link.alive:  # frames of a dropped link are not used: its actor re-sends them after reconnecting
                try:
                    if header is None or isinstance(payload, BaseException):
                        raise FrameError(str(payload))
                    self._handle(link, header, payload, out)
                except (FrameError, SpecError, ValueError, OSError) as exc:
                    self._drop(link, f"dropped {link.actor} ({link.peer}): {exc}")
            try:
                item = self._frames.get_nowait()
            except queue.Empty:
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

    def broadcast(self, version: int, header: dict[str, Any], payload: Payload) -> None:
        """Offer a packed weights version to every actor (and to those that join later); returns at once.

        Every writer sends the same ``payload`` (:meth:`~robot_rl.fleet.wire.WeightsPacker.frame`: the files'
        mappings), none copies it.
        """
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
