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
import mmap
import os
import re
import secrets
import select
import shutil
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Collection, Sequence
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


Payload = bytes | bytearray | memoryview | Sequence[memoryview]
"""A frame's payload: one buffer, or parts sent one after the other (a weights frame's files)."""


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


def _recv_some(sock: socket.socket, into: memoryview, stall_s: float | None) -> int:
    """Bytes received into ``into`` (at least one); FrameError when the peer closed or went silent mid-frame."""
    if stall_s is not None and not _readable(sock, stall_s):
        raise FrameError(f"peer stalled mid-frame: nothing for {stall_s:g} s")
    n = sock.recv_into(into)
    if not n:
        raise FrameError("connection closed mid-frame")
    return n


def recv_payload(sock: socket.socket, n: int, stall_s: float | None = None) -> bytes:
    """The ``n`` payload bytes of a frame whose header :func:`recv_header` read."""
    return _recv_exact(sock, n, stall_s) if n else b""


def discard_payload(sock: socket.socket, n: int, stall_s: float | None = None) -> None:
    """Read and drop ``n`` payload bytes (a frame not wanted), keeping at most one chunk in memory."""
    scratch = memoryview(bytearray(min(n, RECV_CHUNK)))
    while n:
        n -= _recv_some(sock, scratch[:min(n, len(scratch))], stall_s)


def send_frame(sock: socket.socket, header: dict[str, Any], payload: Payload = b"") -> None:
    """Send one message (header + payload) as a single frame; a payload in parts (weights' files) goes uncopied."""
    parts = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else list(payload)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    if len(head) > MAX_HEADER_BYTES:
        raise FrameError(f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    prefix = PREFIX.pack(MAGIC, len(head), sum(memoryview(p).nbytes for p in parts)) + head
    if len(parts) == 1 and len(parts[0]) <= 1 << 16:
        sock.sendall(prefix + parts[0])
        return
    sock.sendall(prefix)
    for part in parts:  # large payloads (weights) go out without a concatenated copy
        sock.sendall(part)


def recv_header(sock: socket.socket, max_payload: int = DEFAULT_MAX_PAYLOAD,
                stall_s: float | None = None) -> tuple[dict[str, Any], int]:
    """The first part of :func:`recv_frame`: a frame's header and its payload's length, the payload left unread."""
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
    return header, payload_len


def recv_frame(sock: socket.socket, max_payload: int = DEFAULT_MAX_PAYLOAD,
               stall_s: float | None = None) -> tuple[dict[str, Any], bytes]:
    """Receive one message; FrameError for a bad magic, oversized parts, non-JSON headers or a closed socket.

    With ``stall_s``, also for a peer that sends nothing for that long mid-frame (waiting for one to start is fine).
    """
    header, payload_len = recv_header(sock, max_payload, stall_s)
    return header, recv_payload(sock, payload_len, stall_s)


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
WEIGHT_CHUNK = 256 * 1024
"""Bytes received, hashed and written at a time: SHA-256 reads them while they are in cache."""


class WeightsRefused(FrameError):
    """A weights frame that is inconsistent (names, sizes, hashes) or cannot be written; its bytes were all read."""


def map_weights(folder: str | Path, version: int, dtype: str = "float32",
                exact: Collection[str] = ()) -> tuple[dict[str, Any], list[memoryview]]:
    """A published ``v<N>/`` folder as a weights frame's header and payload parts: its files, memory-mapped.

    Nothing is copied: the SHA-256 reads the page cache, and sending reads it again. A published folder is never
    rewritten (a new version is a new folder), and a mapping outlives the pruning of its file. With a ``dtype``
    other than float32, each safetensors file is re-encoded in memory with its floating tensors in ``dtype``
    but those named in ``exact`` (:func:`~robot_rl.fleet.push_dtype.narrow_safetensors`).
    """
    files, parts, narrowed = [], [], {}
    for path in sorted(Path(folder).iterdir()):
        if path.is_file() and WEIGHT_FILE.match(path.name):
            if dtype != "float32" and path.suffix == ".safetensors":
                from robot_rl.fleet.push_dtype import narrow_safetensors  # torch: the learner's side only

                encoded, digest = narrow_safetensors(path, dtype, exact)  # hashed as it is written
                data = memoryview(encoded)
                narrowed[path.name] = digest
            else:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    data = memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b"")
                digest = hashlib.sha256(data).hexdigest()
            files.append({"name": path.name, "size": data.nbytes, "sha256": digest})
            parts.append(data)
    if narrowed:  # a policy checkpoint's own record of its weights' SHA-256 describes the narrowed file now
        from robot_rl.fleet.push_dtype import restamp_policy_digest

        for i, entry in enumerate(files):
            restamped = restamp_policy_digest(str(entry["name"]), parts[i], narrowed)
            if restamped is not None:
                parts[i] = memoryview(restamped)
                entry.update(size=len(restamped), sha256=hashlib.sha256(restamped).hexdigest())
    return {"type": "weights", "version": int(version), "files": files}, parts


def pack_weights(folder: str | Path, version: int) -> tuple[dict[str, Any], bytes]:
    """:func:`map_weights` with the payload in one ``bytes`` (for Ray's object store and :func:`unpack_weights`)."""
    header, parts = map_weights(folder, version)
    return header, b"".join(parts)


class WeightsPacker:
    """The newest published version, read and hashed once however many actors and transports (TCP, Ray) take it.

    ``dtype``: what floating tensors travel as (``learner.push_dtype``); ``exact(v<N> folder)``: the tensor names
    that keep their type anyway (a policy's buffers), asked for each version packed in a narrower type.
    """

    def __init__(self, folder: str | Path, dtype: str = "float32",
                 exact: Callable[[Path], Collection[str]] | None = None) -> None:
        from robot_rl.fleet.push_dtype import check_push_dtype

        self.folder, self.dtype, self.exact = Path(folder), check_push_dtype(dtype), exact
        self._packed: tuple[int, dict[str, Any], list[memoryview]] | None = None
        self._lock = threading.Lock()

    def frame(self, version: int) -> tuple[dict[str, Any], list[memoryview]]:
        """``folder/v<version>`` as a weights frame (:func:`map_weights`), mapped and hashed on the first call only."""
        with self._lock:
            if self._packed is None or self._packed[0] != version:
                folder = self.folder / f"v{version}"
                exact = self.exact(folder) if self.exact is not None and self.dtype != "float32" else ()
                self._packed = (version, *map_weights(folder, version, self.dtype, exact))
            return self._packed[1], self._packed[2]


def _weight_entries(header: dict[str, Any], payload_len: int) -> tuple[int, list[tuple[str, int, str]]]:
    """A weights header's version and (name, size, sha256) list; WeightsRefused unless they can describe the payload."""
    version, files = header.get("version"), header.get("files")
    if type(version) is not int or version < 1 or not isinstance(files, list) or not files:  # bool: no v<N>
        raise WeightsRefused(f"weights frame: bad version or file list ({version!r})")
    entries: list[tuple[str, int, str]] = []
    for f in files:
        name, size, digest = (f.get("name"), f.get("size"), f.get("sha256")) if isinstance(f, dict) else (None,) * 3
        if not (isinstance(name, str) and WEIGHT_FILE.match(name) and name not in (".", "..")
                and type(size) is int and size >= 0 and isinstance(digest, str)):
            raise WeightsRefused(f"weights frame: bad file entry {f!r}")
        if any(name == seen for seen, _, _ in entries):  # the second would overwrite the first, checked, file
            raise WeightsRefused(f"weights v{version}: {name} is listed twice")
        entries.append((name, size, digest))
    listed = sum(size for _, size, _ in entries)
    if listed != payload_len:
        raise WeightsRefused(f"weights v{version}: the files listed hold {listed} bytes, the payload {payload_len}")
    return version, entries


def _install(root: Path, version: int, tmp: Path, keep: int) -> Path:
    """Rename a checked ``tmp`` folder to ``root/v<version>`` (atomic) and prune all but the newest ``keep``."""
    final = root / f"v{version}"
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    versions = sorted((int(p.name[1:]), p) for p in root.iterdir() if re.fullmatch(r"v\d+", p.name))
    for _, old in versions[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fresh_folder(root: Path, version: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".v{version}.recv"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def _create(path: Path) -> int:
    """A new file's descriptor for writing (refused if it exists: a received folder starts empty)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def unpack_weights(header: dict[str, Any], payload: bytes | bytearray, root: str | Path, keep: int = 3) -> Path:
    """Check a weights frame (names, sizes, hashes) and write it as ``root/v<N>/`` atomically; prune old versions.

    WeightsRefused (a FrameError) for anything inconsistent: nothing is written then, and the actor keeps its weights.
    """
    version, entries = _weight_entries(header, len(payload))
    view, offset, chunks = memoryview(payload), 0, []  # slices without copying 40 MB per file
    for name, size, digest in entries:
        data = view[offset:offset + size]
        if hashlib.sha256(data).hexdigest() != digest:
            raise WeightsRefused(f"weights v{version}: {name} does not match its SHA-256")
        chunks.append((name, data))
        offset += size
    tmp = _fresh_folder(Path(root), version)
    try:
        for name, data in chunks:
            fd = _create(tmp / name)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
        return _install(Path(root), version, tmp, keep)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def receive_weights(sock: socket.socket, header: dict[str, Any], payload_len: int, root: str | Path,
                    keep: int = 3, stall_s: float | None = None) -> Path:
    """:func:`unpack_weights` for a payload still on ``sock`` (after :func:`recv_header`), never held in memory.

    Each chunk is hashed and written into a hidden folder as it arrives; the folder becomes ``root/v<N>/`` once
    every SHA-256 matched. WeightsRefused for an inconsistent frame or one that cannot be written: its payload
    is read to the end all the same, so the connection stays usable. FrameError or OSError when the connection
    breaks. Nothing is left behind but a complete, checked ``v<N>/``.
    """
    try:
        version, entries = _weight_entries(header, payload_len)
    except WeightsRefused:
        discard_payload(sock, payload_len, stall_s)
        raise
    root, tmp, problem = Path(root), None, None
    try:
        tmp = _fresh_folder(root, version)
    except OSError as exc:
        problem = f"weights v{version}: cannot write into {root}: {exc}"
    chunk = memoryview(bytearray(max(1, min(WEIGHT_CHUNK, payload_len))))
    try:
        for name, size, digest in entries:
            hashed, fd, left = hashlib.sha256(), None, size
            try:
                if tmp is not None and problem is None:
                    fd = _create(tmp / name)
            except OSError as exc:
                problem = f"weights v{version}: cannot write {name}: {exc}"
            try:
                while left:  # the socket's errors end the frame; a file's only refuse it
                    part = chunk[:_recv_some(sock, chunk[:min(left, len(chunk))], stall_s)]
                    hashed.update(part)
                    left -= len(part)
                    if fd is not None:
                        try:
                            _write_all(fd, part)
                        except OSError as exc:
                            problem = f"weights v{version}: cannot write {name}: {exc}"
                            os.close(fd)
                            fd = None
            finally:
                if fd is not None:
                    os.close(fd)
            if problem is None and hashed.hexdigest() != digest:
                problem = f"weights v{version}: {name} does not match its SHA-256"
        if problem is None and tmp is not None:
            try:
                return _install(root, version, tmp, keep)
            except OSError as exc:
                problem = f"weights v{version}: cannot install it in {root}: {exc}"
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when installed
    raise WeightsRefused(str(problem))


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
