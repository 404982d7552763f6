"""Property-based fuzzing of the fleet's mutual authentication (HMAC challenge-response), from both sides.

The learner admits only an actor that proves the shared key, and an actor trusts only a learner that proves it:
any other reply (a flipped or malformed MAC, a wrong message type or nonce, garbage bytes) is an AuthError or a
FrameError within a bounded time, never another exception.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

from helpers.fuzz import fuzz_settings
from hypothesis import example, given
from hypothesis import strategies as st
from test_fuzz_fleet_payloads import KEY, PER_INPUT_S, WRONG_KEY, json_values, returning, timed

from robot_rl.fleet.wire import AuthError, FrameError, _mac, client_handshake, recv_frame, send_frame, server_handshake

# --- the handshake, both sides -------------------------------------------------------------------------------
MAC_LIES = ["intact", "flip", "missing", "non-ascii", "not-a-string", "short", "upper"]


def lie(mac: str, how: str, bit: int) -> Any:
    if how == "flip":
        raw = bytearray(bytes.fromhex(mac))
        raw[bit % len(raw)] ^= 1 << (bit % 8)
        return raw.hex()
    return {"intact": mac, "missing": None, "non-ascii": "é" + mac[1:], "not-a-string": [mac], "short": mac[:-2],
            "upper": mac.upper()}[how]


def converse(sock: socket.socket, script: Callable[[socket.socket], None]) -> threading.Thread:
    """Run the hostile peer's side of a handshake on a thread; it half-closes when done (no waiting on it)."""
    def run() -> None:
        try:
            script(sock)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1 << 16)
        except Exception:  # the side under test hung up early (it refused): the script's end is moot
            pass
        finally:
            sock.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@fuzz_settings(200)
@given(key=st.sampled_from([KEY, WRONG_KEY]), how=st.sampled_from(MAC_LIES), bit=st.integers(0, 255),
       kind=st.sampled_from(["hello", "batch", "welcome", ""]), nonce=st.sampled_from(["ok", "short", "odd", "none"]),
       info=st.dictionaries(st.text(max_size=6), json_values, max_size=3), garbage=st.none() | st.binary(max_size=80))
@example(key=KEY, how="intact", bit=0, kind="hello", nonce="ok", info={"actor": "a"}, garbage=None)
@example(key=KEY, how="non-ascii", bit=0, kind="hello", nonce="ok", info={}, garbage=None)  # TypeError before
def test_the_learner_admits_only_an_actor_that_proves_the_key(key: bytes, how: str, bit: int, kind: str, nonce: str,
                                                             info: dict[str, Any], garbage: bytes | None) -> None:
    learner, actor = socket.socketpair()

    def hostile(sock: socket.socket) -> None:
        challenge, _ = recv_frame(sock, 0)
        if garbage is not None:
            sock.sendall(garbage)
            return
        theirs, mine = bytes.fromhex(challenge["nonce"]), bytes(range(32, 64))
        hello = {**info, "type": kind, "mac": lie(_mac(key, b"actor", theirs, mine), how, bit),
                 "nonce": {"ok": mine.hex(), "short": mine[:8].hex(), "odd": mine.hex()[:-1], "none": None}[nonce]}
        send_frame(sock, hello)

    thread = converse(actor, hostile)
    try:
        got = timed("fleet: learner handshake", lambda: server_handshake(learner, KEY, timeout=PER_INPUT_S / 2),
                    (AuthError, FrameError))
    finally:
        learner.close()
        thread.join(5)
    valid = garbage is None and key == KEY and how == "intact" and kind == "hello" and nonce == "ok"
    assert (got is not None) == valid, (got, key == KEY, how, kind, nonce)
    if got is not None:
        assert not {"mac", "nonce", "type"} & set(got)


@fuzz_settings(200)
@given(key=st.sampled_from([KEY, WRONG_KEY]), how=st.sampled_from(MAC_LIES), bit=st.integers(0, 255),
       kind=st.sampled_from(["welcome", "refused", "resume", ""]),
       challenge=st.sampled_from(["ok", "odd", "none", "wrong-type"]), reason=json_values,
       garbage=st.none() | st.binary(max_size=80))
@example(key=KEY, how="intact", bit=0, kind="welcome", challenge="ok", reason=None, garbage=None)
@example(key=KEY, how="non-ascii", bit=0, kind="welcome", challenge="ok", reason=None, garbage=None)  # TypeError
def test_an_actor_trusts_only_a_learner_that_proves_the_key(key: bytes, how: str, bit: int, kind: str,
                                                            challenge: str, reason: Any, garbage: bytes | None) -> None:
    actor, learner = socket.socketpair()
    nonce = bytes(range(64, 96))

    def hostile(sock: socket.socket) -> None:
        if garbage is not None:
            sock.sendall(garbage)
            return
        nonces = {"ok": nonce.hex(), "odd": "abc", "none": None, "wrong-type": nonce.hex()}
        send_frame(sock, {"type": "hello" if challenge == "wrong-type" else "challenge", "nonce": nonces[challenge]})
        hello, _ = recv_frame(sock, 0)
        mac = _mac(key, b"learner", bytes.fromhex(hello["nonce"]), nonce)
        send_frame(sock, {"type": kind, "reason": reason, "mac": lie(mac, how, bit)})

    thread = converse(learner, hostile)
    try:
        got = timed("fleet: actor handshake", returning(client_handshake, actor, KEY, {"actor": "a"}, PER_INPUT_S / 2),
                    (AuthError, FrameError))
    finally:
        actor.close()
        thread.join(5)
    valid = garbage is None and key == KEY and how == "intact" and kind == "welcome" and challenge == "ok"
    assert (got is not None) == valid, (key == KEY, how, kind, challenge)
