"""Framed, authenticated messages between a learner and actors on other machines (TCP, optionally TLS).

The fleet transport's lowest layer. Every message is one frame: a fixed 12-byte prefix (magic ``RRL1``,
header length, payload length, big-endian), a JSON header (what the message is: ``{"type": "batch",
"seq": 7}``) and a binary payload (safetensors bytes: transitions or weights). Nothing is ever unpickled;
sizes are checked against limits before anything is allocated, so a corrupt or hostile length cannot
make the learner allocate gigabytes.

Authentication is a mutual HMAC-SHA256 challenge-response over a shared secret (the run's key), as
``multiprocessing.connection`` does but with SHA-256 and both directions explicit: the learner proves it
knows the key too, so an actor never streams a robot's data to an impostor. The secret never crosses
the wire. TLS (``ssl`` from the standard library) wraps the socket underneath for confidentiality (required
off loopback: robot_rl.fleet.security); the handshake runs inside it either way. The secret file and the
TLS private key are refused when group or others may read them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import select
import shutil
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

from robot_rl.fleet.security import check_secret_file

CONFIG_FILE = "online.yaml"
"""The run folder's config, written by whoever starts the run and read by every role (and sent to TCP actors)."""

MAGIC = b"RRL1"
PREFIX = struct.Struct("!4sII")
"""Magic, header length, payload length."""
MAX_HEADER_BYTES = 64 * 1024
"""Largest JSON header accepted."""
DEFAULT_MAX_PAYLOAD = 256 * 1024 * 1024
"""Largest payload accepted unless the caller says otherwise (a 64x64 camera batch is well below)."""
RECV_CHUNK = 1 << 20
"""Bytes read per call: what a frame's length field makes us allocate ahead of its bytes arriving."""
NONCE_BYTES = 32
HANDSHAKE_TIMEOUT_S = 10.0
"""A peer that does not finish the handshake within this time is dropped (no half-open slots)."""


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:7450`` for IPv6) as a socket address; ValueError when malformed."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected host:port, got {text!r}")
    return host.strip("[]"), int(port)


class FrameError(Exception):
    """A malformed, oversized or truncated frame, or a closed connection."""


class AuthError(Exception):
    """The peer does not know the shared secret (or did not follow the handshake)."""


def _readable(sock: socket.socket, timeout: float) -> bool:
    if isinstance(sock, ssl.SSLSocket) and sock.pending():  # decrypted bytes select cannot see
        return True
    return bool(select.select([sock], [], [], timeout)[0])


def _recv_exact(sock: socket.socket, n: int, stall_s: float | None = None, started: bool = True) -> bytes:
    """``n`` bytes; the buffer grows as they arrive, so a hostile length allocates nothing until its bytes come.

    ``stall_s``: FrameError when no byte arrives for that long once the frame has ``started`` (a peer gone silent
    mid-frame cannot hang us; one idle between frames is waited for).
    """
    buf = bytearray()
    while len(buf) < n:
        if stall_s is not None and (buf or started) and not _readable(sock, stall_s):
            raise FrameError(f"peer stalled mid-frame: nothing for {stall_s:g} s after {len(buf)} of {n} bytes")
        chunk = sock.recv(min(n - len(buf), RECV_CHUNK))
        if not chunk:
            raise FrameError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    """Send one message (header + payload) as a single frame."""
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(head) > MAX_HEADER_BYTES:
        raise FrameError(f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    prefix = PREFIX.pack(MAGIC, len(head), len(payload)) + head
    if len(payload) > 1 << 16:  # large payloads (weights) go out without a concatenated copy
        sock.sendall(prefix)
        sock.sendall(payload)
    else:
        sock.sendall(prefix + payload)


def recv_frame(sock: socket.socket, max_payload: int = DEFAULT_MAX_PAYLOAD,
               stall_s: float | None = None) -> tuple[dict[str, Any], bytes]:
    """Receive one message; FrameError for a bad magic, oversized parts, non-JSON headers or a closed socket.

    With ``stall_s``, also for a peer that sends nothing for that long mid-frame (waiting for one to start is fine).
    """
    magic, head_len, payload_len = PREFIX.unpack(_recv_exact(sock, PREFIX.size, stall_s, started=False))
    if magic != MAGIC:
        raise FrameError(f"not a robot_rl frame (magic {magic!r})")
    if head_len > MAX_HEADER_BYTES:
        raise FrameError(f"header of {head_len} bytes exceeds {MAX_HEADER_BYTES}")
    if payload_len > max_payload:
        raise FrameError(f"payload of {payload_len} bytes exceeds the limit of {max_payload}")
    try:
        header = json.loads(_recv_exact(sock, head_len, stall_s).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8/JSON, a 5000-digit number, nesting 60 000 deep
        raise FrameError(f"header is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from exc
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise FrameError("header must be a JSON object with a 'type'")
    return header, _recv_exact(sock, payload_len, stall_s) if payload_len else b""


def _mac(key: bytes, role: bytes, first: bytes, second: bytes) -> str:
    return hmac.new(key, role + first + second, hashlib.sha256).hexdigest()


def _mac_ok(given: Any, expected: str) -> bool:
    """Constant-time check of a peer's MAC; anything but an ASCII string is wrong (compare_digest raises on it)."""
    return isinstance(given, str) and given.isascii() and hmac.compare_digest(given, expected)


def server_handshake(sock: socket.socket, key: bytes, timeout: float = HANDSHAKE_TIMEOUT_S) -> dict[str, Any]:
    """Learner side: challenge the peer, check its answer, prove the key back. Returns the peer's hello.

    Raises AuthError (wrong secret, wrong protocol) or FrameError (the peer went away or sent garbage).
    """
    previous = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        nonce = secrets.token_bytes(NONCE_BYTES)
        send_frame(sock, {"type": "challenge", "nonce": nonce.hex()})
        hello, _ = recv_frame(sock, max_payload=0)
        if hello.get("type") != "hello":
            raise AuthError(f"expected a hello, got {hello.get('type')!r}")
        try:
            theirs = bytes.fromhex(str(hello["nonce"]))
        except (KeyError, ValueError) as exc:
            raise AuthError("hello without a valid nonce") from exc
        if len(theirs) != NONCE_BYTES or not _mac_ok(hello.get("mac"), _mac(key, b"actor", nonce, theirs)):
            send_frame(sock, {"type": "refused", "reason": "authentication failed"})
            raise AuthError("authentication failed (wrong shared secret)")
        send_frame(sock, {"type": "welcome", "mac": _mac(key, b"learner", theirs, nonce)})
        return {k: v for k, v in hello.items() if k not in ("type", "nonce", "mac")}
    except (TimeoutError, OSError) as exc:
        raise FrameError(f"handshake did not complete ({exc})") from exc
    finally:
        sock.settimeout(previous)


def client_handshake(sock: socket.socket, key: bytes, info: dict[str, Any] | None = None,
                     timeout: float = HANDSHAKE_TIMEOUT_S) -> None:
    """Actor side: answer the learner's challenge with ``info`` (actor id, host, task...) and check its proof.

    Raises AuthError when the learner refuses the secret or cannot prove it knows it.
    """
    previous = sock.gettimeout()
    sock.settimeout(timeout)
    try:
        challenge, _ = recv_frame(sock, max_payload=0)
        if challenge.get("type") != "challenge":
            raise AuthError(f"expected a challenge, got {challenge.get('type')!r}")
        theirs = bytes.fromhex(str(challenge.get("nonce", "")))
        nonce = secrets.token_bytes(NONCE_BYTES)
        send_frame(sock, {**(info or {}), "type": "hello", "nonce": nonce.hex(),
                          "mac": _mac(key, b"actor", theirs, nonce)})
        answer, _ = recv_frame(sock, max_payload=0)
        if answer.get("type") == "refused":
            raise AuthError(f"the learner refused this actor: {answer.get('reason')}")
        if answer.get("type") != "welcome" or not _mac_ok(answer.get("mac"), _mac(key, b"learner", nonce, theirs)):
            raise AuthError("the learner could not prove it knows the shared secret")
    except ValueError as exc:
        raise AuthError(f"malformed challenge ({exc})") from exc
    except (TimeoutError, OSError) as exc:
        raise FrameError(f"handshake did not complete ({exc})") from exc
    finally:
        sock.settimeout(previous)


def tls_server_context(certfile: str | Path, keyfile: str | Path) -> ssl.SSLContext:
    """TLS for the learner's listening socket (a certificate the actors trust).

    InsecureFileError when ``keyfile`` is readable by group or others.
    """
    check_secret_file(keyfile, "TLS private key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(certfile), str(keyfile))
    return ctx


def tls_client_context(cafile: str | Path, check_hostname: bool = True) -> ssl.SSLContext:
    """TLS for an actor: trusts the learner's certificate (or the CA that signed it) in ``cafile``."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(cafile))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    return ctx


# ---------------------------------------------------------------------------- weights over the wire
WEIGHT_FILE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
"""Names a weights frame may carry: plain file names, no paths (a peer cannot write outside the folder)."""


def pack_weights(folder: str | Path, version: int) -> tuple[dict[str, Any], bytes]:
    """A published ``v<N>/`` folder as one frame: its files concatenated, each named with size and SHA-256."""
    files, parts = [], []
    for path in sorted(Path(folder).iterdir()):
        if path.is_file() and WEIGHT_FILE.match(path.name):
            data = path.read_bytes()
            files.append({"name": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            parts.append(data)
    return {"type": "weights", "version": int(version), "files": files}, b"".join(parts)


def unpack_weights(header: dict[str, Any], payload: bytes, root: str | Path, keep: int = 3) -> Path:
    """Check a weights frame (names, sizes, hashes) and write it as ``root/v<N>/`` atomically; prune old versions.

    FrameError for anything inconsistent: nothing is written then, and the actor keeps its weights.
    """
    version, files = header.get("version"), header.get("files")
    if type(version) is not int or version < 1 or not isinstance(files, list) or not files:  # bool: no v<N>
        raise FrameError(f"weights frame: bad version or file list ({version!r})")
    offset = 0
    chunks: list[tuple[str, memoryview]] = []
    view = memoryview(payload)  # slices without copying 40 MB per file
    for f in files:
        name, size, digest = (f.get("name"), f.get("size"), f.get("sha256")) if isinstance(f, dict) else (None,) * 3
        if not (isinstance(name, str) and WEIGHT_FILE.match(name) and name not in (".", "..")
                and isinstance(size, int) and size >= 0 and isinstance(digest, str)):
            raise FrameError(f"weights frame: bad file entry {f!r}")
        if any(name == seen for seen, _ in chunks):  # the second would overwrite the first, checked, file
            raise FrameError(f"weights v{version}: {name} is listed twice")
        data = view[offset:offset + size]
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            raise FrameError(f"weights v{version}: {name} does not match its size or SHA-256")
        chunks.append((name, data))
        offset += size
    if offset != len(payload):
        raise FrameError(f"weights v{version}: {len(payload) - offset} bytes beyond the listed files")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / f"v{version}", root / f".v{version}.recv"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, data in chunks:
        (tmp / name).write_bytes(data)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    versions = sorted((int(p.name[1:]), p) for p in root.iterdir() if re.fullmatch(r"v\d+", p.name))
    for _, old in versions[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_secret(path: str | Path) -> bytes:
    """The run's shared secret from a copy of its ``learner.key`` (hex), e.g. on a robot.

    InsecureFileError (a ValueError) when group or others may read it.
    """
    text = check_secret_file(path, "shared secret").read_text(encoding="ascii").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not a learner key (hex)") from exc
    if len(key) < 16:
        raise ValueError(f"{path}: a key of {len(key)} bytes is too short")
    return key
