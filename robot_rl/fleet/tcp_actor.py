"""The actor's end of the fleet's TCP link (:mod:`robot_rl.fleet.tcp_transport` is the learner's end).

An actor proves the run's secret, learns how far the learner's checkpoint holds its batches, re-sends the
rest from its :class:`~robot_rl.fleet.delivery.Outbox`, streams new batches and takes the weights the
learner pushes (sizes and hashes checked, written as ``v<N>/`` for the usual follower, whose loader casts a
float16 or bfloat16 push back into the float32 network). A lost link is
re-dialled with backoff (:class:`~robot_rl.fleet.reconnect.Reconnect`); plaintext off loopback is refused
unless explicitly allowed (:func:`~robot_rl.fleet.security.check_transport`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from robot_rl.core.transition import Transition
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.reconnect import Reconnect
from robot_rl.fleet.security import check_transport
from robot_rl.fleet.wire import (
    AuthError,
    FrameError,
    WeightsRefused,
    client_handshake,
    discard_payload,
    receive_weights,
    recv_frame,
    recv_header,
    send_frame,
)

log = logging.getLogger(__name__)
MAX_WEIGHTS_BYTES = 4 * 1024 * 1024 * 1024
"""Largest weights frame an actor accepts (a 1B-parameter fp32 policy)."""


class TcpActorClient:
    """Actor end: a TransitionSender whose batches survive disconnects, learner kills and actor restarts.

    A reader thread applies acknowledgements and writes received weights into ``weights_dir`` (when given);
    :meth:`send` reconnects (at most every ``RECONNECT_EVERY_S``) while the learner is away.
    """

    def __init__(self, address: tuple[str, int], key: bytes, actor: str, outbox: Outbox,
                 info: dict[str, Any] | None = None, tls: ssl.SSLContext | None = None,
                 server_hostname: str | None = None, weights_dir: str | Path | None = None,
                 version: Callable[[], int] | None = None,
                 resolve: Callable[[], tuple[str, int]] | None = None, allow_plaintext: bool | None = None) -> None:
        self.address, self.key, self.actor, self.outbox = address, key, actor, outbox
        self.allow_plaintext = allow_plaintext
        """Plaintext to a non-loopback learner: refused unless True (None: the ROBOT_RL_ALLOW_PLAINTEXT variable)."""
        self._checked: str | None = None
        self.resolve = resolve
        """Where the learner serves now, asked before each reconnect (it may have moved); None: a fixed address."""
        self.info, self.tls, self.server_hostname = dict(info or {}), tls, server_hostname
        self._check_transport()
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

        Raises AuthError when the secret is refused, OSError/FrameError when the learner is unreachable,
        InsecureTransportError when it is not on loopback, there is no TLS and plaintext was not allowed.
        """
        self._check_transport()
        raw = socket.create_connection(self.address, timeout=timeout)
        try:
            sock = (self.tls.wrap_socket(raw, server_hostname=self.server_hostname or self.address[0])
                    if self.tls is not None else raw)
            client_handshake(sock, self.key, {**self.info, "actor": self.actor}, timeout)
            header, _ = recv_frame(sock, max_payload=0)
            marks = [header.get(k, 0) for k in ("mark", "received", "number")]  # batch numbers, the run's number
            if header["type"] != "resume" or "mark" not in header or any(
                    type(v) is not int or not 0 <= v < 10**12 for v in marks):  # 12 digits: an outbox file's name
                raise FrameError(f"expected the learner's resume mark, got {str(header)[:300]}")
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

    def _check_transport(self) -> None:
        """The TLS rule for the current address (checked, and warned about, once per host)."""
        host = self.address[0]
        if host != self._checked:
            check_transport(host, self.tls is not None, f"actor {self.actor} connecting to {host}:{self.address[1]}",
                            self.allow_plaintext)
            self._checked = host

    def _batch_header(self, seq: int) -> dict[str, Any]:
        header = {"type": "batch", "seq": seq, "oldest": self.outbox.oldest}
        if self.version is not None:
            header["version"] = int(self.version())
        return header

    def _read(self, sock: socket.socket) -> None:
        """Acknowledgements and weights from the learner, until the connection ends.

        Weights stream from the socket into the weights folder (hashed and written chunk by chunk, never held
        whole in memory); payloads of other frames are not used and are read past.
        """
        while True:
            try:
                header, size = recv_header(sock, max_payload=MAX_WEIGHTS_BYTES)
                if header.get("type") == "weights" and self.weights_dir is not None:
                    self._take_weights(sock, header, size)
                    continue
                discard_payload(sock, size)
            except (FrameError, OSError):
                break
            if header.get("type") == "ack" and isinstance(header.get("seq"), int):
                with self._lock:
                    self.outbox.ack(header["seq"])
                    self._acked.notify_all()
        with self._lock:
            if self._sock is sock:
                self._sock = None
            self._acked.notify_all()
        with contextlib.suppress(OSError):
            sock.close()

    def _take_weights(self, sock: socket.socket, header: dict[str, Any], size: int) -> None:
        """Receive a weights frame into ``weights_dir``; one refused is logged (the connection goes on)."""
        assert self.weights_dir is not None
        try:
            receive_weights(sock, header, size, self.weights_dir)
            self.received_versions.append((int(header["version"]), time.time()))
        except WeightsRefused as exc:
            self.refused_weights.append(str(exc))
            log.warning("refused weights from the learner: %s", exc)

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
