"""The fleet's wire: framed messages, mutual HMAC authentication over a shared secret, TLS underneath."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from robot_rl.fleet.security import InsecureFileError
from robot_rl.fleet.transport import load_or_create_key
from robot_rl.fleet.wire import (
    MAGIC,
    PREFIX,
    AuthError,
    FrameError,
    client_handshake,
    read_secret,
    recv_frame,
    send_frame,
    server_handshake,
    tls_client_context,
    tls_server_context,
)

KEY = bytes(range(32))


def serve_once(handler: Callable[[socket.socket], Any], wrap: ssl.SSLContext | None = None
               ) -> tuple[int, dict[str, Any], threading.Thread]:
    """A one-connection TCP server on localhost running ``handler``; its result or exception lands in the dict."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    out: dict[str, Any] = {}

    def run() -> None:
        conn, _ = listener.accept()
        try:
            if wrap is not None:
                conn = wrap.wrap_socket(conn, server_side=True)
            out["result"] = handler(conn)
        except Exception as exc:  # handed to the test
            out["error"] = exc
        finally:
            conn.close()
            listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return port, out, thread


def learner(key: bytes) -> Callable[[socket.socket], Any]:
    def handle(conn: socket.socket) -> Any:
        hello = server_handshake(conn, key)
        header, payload = recv_frame(conn)
        send_frame(conn, {"type": "ack", "seq": header["seq"]})
        return hello, header, payload
    return handle


def test_matching_secrets_authenticate_both_ways_and_frames_round_trip() -> None:
    port, out, thread = serve_once(learner(KEY))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        client_handshake(sock, KEY, {"actor": "sim-3", "task": "pick_lift"})
        payload = bytes(range(256)) * 1000
        send_frame(sock, {"type": "batch", "seq": 7}, payload)
        assert recv_frame(sock) == ({"type": "ack", "seq": 7}, b"")
    thread.join(5)
    hello, header, received = out["result"]
    assert hello == {"actor": "sim-3", "task": "pick_lift"} and header == {"type": "batch", "seq": 7}
    assert received == payload


def test_a_wrong_secret_is_refused_on_both_sides() -> None:
    port, out, thread = serve_once(learner(KEY))
    with socket.create_connection(("127.0.0.1", port)) as sock, pytest.raises(AuthError, match="refused"):
        client_handshake(sock, b"not the key" * 3)
    thread.join(5)
    assert isinstance(out["error"], AuthError) and "wrong shared secret" in str(out["error"])


def test_an_impostor_learner_that_cannot_prove_the_secret_is_not_trusted() -> None:
    def impostor(conn: socket.socket) -> None:
        send_frame(conn, {"type": "challenge", "nonce": "00" * 32})
        recv_frame(conn, max_payload=0)
        send_frame(conn, {"type": "welcome", "mac": "00" * 32})  # accepts anybody, knows no key

    port, _, thread = serve_once(impostor)
    with socket.create_connection(("127.0.0.1", port)) as sock, pytest.raises(AuthError, match="could not prove"):
        client_handshake(sock, KEY)
    thread.join(5)


def test_malformed_and_oversized_frames_are_refused_before_allocation() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(PREFIX.pack(MAGIC, 2, 10**9) + b"{}")  # a 1 GB payload announced
        with pytest.raises(FrameError, match="exceeds the limit"):
            recv_frame(b, max_payload=1024)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!4sII", b"HTTP", 1, 0) + b"x")
        with pytest.raises(FrameError, match="not a robot_rl frame"):
            recv_frame(b)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(PREFIX.pack(MAGIC, 5, 0) + b"\x80abcd")
        with pytest.raises(FrameError, match="not JSON"):
            recv_frame(b)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(PREFIX.pack(MAGIC, 10, 0) + b"{}")
        a.close()
        with pytest.raises(FrameError, match="closed after 2 of 10"):
            recv_frame(b)


def test_a_silent_peer_is_dropped_after_the_handshake_timeout() -> None:
    a, b = socket.socketpair()
    with a, b, pytest.raises(FrameError, match="handshake did not complete"):
        server_handshake(b, KEY, timeout=0.2)  # a never answers the challenge


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_the_handshake_runs_inside_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "learner.crt", tmp_path / "learner.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    port, out, thread = serve_once(learner(KEY), wrap=tls_server_context(cert, key))
    ctx = tls_client_context(cert)
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as sock:
        client_handshake(sock, KEY, {"actor": "robot-1"})
        send_frame(sock, {"type": "batch", "seq": 1}, b"weights")
        assert recv_frame(sock)[0] == {"type": "ack", "seq": 1}
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
    thread.join(5)
    assert out["result"][0] == {"actor": "robot-1"} and out["result"][2] == b"weights"
    port = serve_once(learner(KEY), wrap=tls_server_context(cert, key))[0]
    # an actor without the learner's certificate refuses it
    with socket.create_connection(("127.0.0.1", port)) as raw, pytest.raises(ssl.SSLCertVerificationError):
        ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")


def test_secret_files_readable_by_others_are_refused_with_the_chmod_to_run(tmp_path: Path) -> None:
    copy = tmp_path / "robot.key"
    copy.write_text(KEY.hex())
    for mode in (0o644, 0o640, 0o604, 0o620):
        os.chmod(copy, mode)
        with pytest.raises(InsecureFileError, match=f"chmod 600 {copy}"):
            read_secret(copy)
    os.chmod(copy, 0o600)
    assert read_secret(copy) == KEY
    run = tmp_path / "run"
    run.mkdir()
    key = load_or_create_key(run)
    assert os.stat(run / "learner.key").st_mode & 0o777 == 0o600  # created private
    assert load_or_create_key(run) == key
    os.chmod(run / "learner.key", 0o640)
    with pytest.raises(InsecureFileError, match="chmod 600"):
        load_or_create_key(run)
    tls_key = tmp_path / "learner.pem"
    tls_key.write_text("-----BEGIN PRIVATE KEY-----\n")
    os.chmod(tls_key, 0o644)
    with pytest.raises(InsecureFileError, match="TLS private key"):  # refused before it is even parsed
        tls_server_context(tmp_path / "learner.crt", tls_key)
