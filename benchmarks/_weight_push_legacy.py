"""The weight push as it was before issue 40, kept so that benchmarks/fleet_transport.py can time it side by side.

Learner: every file read back whole, SHA-256'd, concatenated with ``b"".join``. Actor: the whole payload received
into a growing bytearray and copied into ``bytes``, then every file hashed again and written. The wire format
is the same as today's, so this actor takes frames from today's learner.
"""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path
from typing import Any

from robot_rl.fleet.tcp_actor import MAX_WEIGHTS_BYTES, TcpActorClient
from robot_rl.fleet.wire import MAGIC, PREFIX, RECV_CHUNK, WEIGHT_FILE, FrameError, unpack_weights


def pack_weights(folder: str | Path, version: int) -> tuple[dict[str, Any], bytes]:
    """The old packing: read, hash, join."""
    files, parts = [], []
    for path in sorted(Path(folder).iterdir()):
        if path.is_file() and WEIGHT_FILE.match(path.name):
            data = path.read_bytes()
            files.append({"name": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            parts.append(data)
    return {"type": "weights", "version": int(version), "files": files}, b"".join(parts)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), RECV_CHUNK))
        if not chunk:
            raise FrameError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, max_payload: int) -> tuple[dict[str, Any], bytes, float]:
    """The old frame reader (payload whole, in ``bytes``); also when the header had arrived."""
    import json

    magic, head_len, payload_len = PREFIX.unpack(_recv_exact(sock, PREFIX.size))
    if magic != MAGIC or payload_len > max_payload:
        raise FrameError("bad frame")
    header = json.loads(_recv_exact(sock, head_len).decode("utf-8"))
    started = time.time()
    return header, _recv_exact(sock, payload_len) if payload_len else b"", started


class LegacyActorClient(TcpActorClient):
    """An actor receiving weights the old way; ``report`` gets (version, header, received, written) times."""

    report: Any = None

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                header, payload, started = recv_frame(sock, MAX_WEIGHTS_BYTES)
            except (FrameError, OSError):
                break
            if header.get("type") == "weights" and self.weights_dir is not None:
                received = time.time()
                unpack_weights(header, payload, self.weights_dir)  # hash + write: today's code is the same work
                done = time.time()
                self.received_versions.append((int(header["version"]), done))
                if self.report is not None:
                    self.report((int(header["version"]), started, received, done))
        self._sock = None
