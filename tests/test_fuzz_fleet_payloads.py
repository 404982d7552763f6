"""Property-based fuzzing of what the learner and the actors receive from each other over the fleet transport.

Entry points: the frame reader (length fields, truncation, garbage, hostile JSON headers, other protocol magics),
both sides of the HMAC handshake (wrong key, flipped, missing or non-ASCII MACs, bad nonces, wrong kinds), the
learner's batch handler (NaN, wrong dtypes and shapes, scalars, renamed or missing columns, bad ids and sequence
numbers), the actor's weights check (truncated, bit-flipped, wrong sizes and hashes, path names), its reader loop
and its resume mark. Each input runs in-process (ms); a subset goes over real sockets to a running learner, which
must stay up, log every refused or dropped connection with its reason and keep serving a well-behaved actor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.fuzz import bounded, fuzz_settings, outcome_of, tally
from hypothesis import example, given
from hypothesis import strategies as st
from safetensors.numpy import save

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.core.transition_columns import transitions_to_columns
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.security import RefusalLimiter
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.tcp_transport import ActorLink, TcpTransitionServer
from robot_rl.fleet.wire import (
    MAGIC,
    PREFIX,
    AuthError,
    FrameError,
    client_handshake,
    pack_weights,
    recv_frame,
    send_frame,
    server_handshake,
    tls_client_context,
    tls_server_context,
    unpack_weights,
)

KEY = bytes(range(32))
WRONG_KEY = b"w" * 32
PER_INPUT_S = 3.0
"""Bound on handling one input (generous: CI shares two cores); a hang or a slow path fails the property."""
MAX_PAYLOAD = 64 * 1024
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                   max_size=3), max_leaves=8)


def frame(header: bytes, payload: bytes = b"", head_len: int | None = None, payload_len: int | None = None,
          magic: bytes = MAGIC) -> bytes:
    """A frame's bytes, with its length fields overridable (lies)."""
    return PREFIX.pack(magic, len(header) if head_len is None else head_len,
                       len(payload) if payload_len is None else payload_len) + header + payload


def timed(entry: str, call: Callable[[], Any], refusals: tuple[type[BaseException], ...]) -> Any:
    """``outcome_of`` bounded in CPU time (a slow path) and, loosely, in wall time (a hang that waits: the
    stall timeouts are PER_INPUT_S / 2; a drill at low priority may be preempted for seconds)."""
    return bounded(outcome_of, entry, call, refusals, cpu_s=PER_INPUT_S, wall_s=10 * PER_INPUT_S)


def returning(call: Callable[..., object], *args: Any) -> Callable[[], bool]:
    """``call(*args)`` as a thunk returning True (outcome_of takes None for a refusal)."""
    return lambda: call(*args) is None or True


def encode(cols: dict[str, np.ndarray]) -> bytes:
    """A batch's safetensors bytes (0-d columns kept 0-d); junk for what safetensors cannot even write."""
    try:
        return bytes(save({k: np.array(v, order="C") for k, v in cols.items()}))
    except Exception:
        return b"junk"


def served(srv: TcpTransitionServer, episode: int) -> list[Transition]:
    """What the learner receives of ``episode`` within 10 s (a well-behaved actor's steps)."""
    deadline, got = time.monotonic() + 10, []  # type: float, list[Transition]
    while not got and time.monotonic() < deadline:
        got = [t for t in srv.receive(timeout=0.05) if t.episode_id == episode]
    return got


def feed(data: bytes) -> socket.socket:
    """A socket whose peer sent ``data`` and closed (a writer thread: big inputs do not block on the buffer)."""
    a, b = socket.socketpair()

    def write() -> None:
        with a, contextlib.suppress(OSError):
            a.sendall(data)

    threading.Thread(target=write, daemon=True).start()
    return b


def step(k: int, episode: int = 0) -> Transition:
    obs: dict[str, np.ndarray] = {"state": np.array([k, 0.5], np.float32), "cam": np.full((2, 2), k % 255, np.uint8)}
    return Transition(observation=obs, next_observation=obs, action=np.array([0.1, -0.2], np.float32), reward=1.0,
                      terminated=False, truncated=False, episode_id=episode, step=k, obs_stamp=float(k),
                      policy_action=np.zeros(2, np.float32), next_obs_stamp=float(k) + 0.1)


# --- the frame reader ----------------------------------------------------------------------------------------
hostile_headers = st.one_of(
    st.binary(max_size=64), st.just(b"[" * 50_000), st.just(b'{"type":"batch","seq":' + b"9" * 5000 + b"}"),
    st.builds(lambda v: json.dumps(v).encode(), json_values),
    st.builds(lambda t, v: json.dumps({"type": t, "seq": v}).encode(), st.text(max_size=6), json_values),
    st.sampled_from([b'{"type":"batch","seq":NaN}', b'{"type":"\\ud800"}', b"\xff\xfe", b'{"type":1}', b"null"]))
frames = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda h, p, cut: frame(h, p)[:cut], hostile_headers, st.binary(max_size=64), st.integers(0, 400)),
    st.builds(lambda h, p: frame(h, p), hostile_headers, st.binary(max_size=64)),
    st.builds(lambda h, hl, pl: frame(h, b"", hl, pl), hostile_headers, st.integers(0, 2**32 - 1),
              st.integers(0, 2**32 - 1)),
    st.builds(lambda m, h: frame(h, magic=m), st.binary(min_size=4, max_size=4) | st.sampled_from([b"RRL0", b"RRL2"]),
              hostile_headers))  # other protocol versions are other magics


@fuzz_settings(200)
@given(data=frames)
@example(data=frame(b"[" * 50_000))  # RecursionError escaped recv_frame before the fix
@example(data=frame(b'{"type":"x","n":' + b"1" * 5000 + b"}"))  # ValueError (int digits) escaped likewise
def test_the_frame_reader_refuses_any_bytes_with_a_frame_error(data: bytes) -> None:
    sock = feed(data)
    try:
        got = timed("fleet: learner frame", lambda: recv_frame(sock, MAX_PAYLOAD, stall_s=PER_INPUT_S / 2),
                    (FrameError,))
    finally:
        sock.close()
    if got is not None:
        header, payload = got
        assert isinstance(header, dict) and isinstance(header["type"], str) and len(payload) <= MAX_PAYLOAD


@pytest.mark.parametrize("limit", [256 * 1024 * 1024, 4 * 1024 * 1024 * 1024 - 1])
def test_a_hostile_length_field_allocates_nothing_before_its_bytes_arrive(limit: int) -> None:
    sock = feed(frame(b'{"type":"weights"}', b"x" * 1000, payload_len=limit))  # 1000 bytes come, then EOF
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match=f"connection closed after 1000 of {limit} bytes"):
            recv_frame(sock, max_payload=limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sock.close()
    assert peak < 8 * 1024 * 1024, f"{peak} bytes allocated for a {limit}-byte length field"


# --- transition batches into the learner ---------------------------------------------------------------------
FLOATS = ["reward", "obs_stamp", "next_obs_stamp", "action", "policy_action", "obs.state"]
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.uint64, np.bool_]


def mutate(cols: dict[str, np.ndarray], how: str, name: str, value: Any, dtype: Any) -> None:
    """One hostile change to a batch's columns (``name``: the column it hits, when it exists)."""
    if how == "drop":
        cols.pop(name, None)
    elif how == "rename":
        if name in cols:
            cols[str(value)[:20] or "x"] = cols.pop(name)
    elif how == "extra":
        cols[str(value)[:20] or "x"] = np.zeros(3, np.float32)
    elif how == "nan" and name in cols and cols[name].dtype.kind == "f" and cols[name].size:
        cols[name] = cols[name].copy()
        with np.errstate(all="ignore"):
            cols[name].flat[0] = value if isinstance(value, float) else np.nan
    elif how == "dtype" and name in cols:
        with np.errstate(all="ignore"):
            cols[name] = cols[name].astype(dtype)
    elif how == "scalar" and name in cols:
        cols[name] = np.asarray(cols[name].reshape(-1)[0] if cols[name].size else 0, cols[name].dtype)
    elif how == "extra-dim" and name in cols:
        cols[name] = cols[name][..., None]
    elif how == "rows" and name in cols and cols[name].ndim:
        cols[name] = cols[name][: max(0, len(cols[name]) - 1)]
    elif how == "empty":
        for k in cols:
            cols[k] = cols[k][:0] if cols[k].ndim else cols[k]
    elif how == "value" and name in cols and cols[name].size and isinstance(value, (int, float)):
        cols[name] = cols[name].copy()
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cols[name].flat[0] = np.array(value).astype(cols[name].dtype)


COLUMN_NAMES = [*FLOATS, "source", "episode_id", "step", "segment_id", "policy_version", "task", "is_intervention",
                "terminated", "has_policy_action", "base_action", "obs.cam", "next_obs.cam", "next_obs.state"]
mutations = st.lists(st.tuples(
    st.sampled_from(["drop", "rename", "extra", "nan", "dtype", "scalar", "extra-dim", "rows", "empty", "value"]),
    st.sampled_from(COLUMN_NAMES),
    st.one_of(st.floats(), st.integers(-2**63, 2**64 - 1), st.sampled_from([np.nan, np.inf, -1, 3, 255, "obs.", "obs.z",
                                                                           "next_obs.z", ""])),
    st.sampled_from(DTYPES)), max_size=3)


_LIE = b'{"action":{"dtype":"F32","shape":[1099511627776,2],"data_offsets":[0,8]}}'
LYING_SAFETENSORS = len(_LIE).to_bytes(8, "little") + _LIE + b"\0" * 8
"""A column whose header claims 8 TiB over 8 bytes of data (a huge array must not be allocated)."""


@pytest.fixture(scope="module")
def server() -> Iterator[TcpTransitionServer]:
    srv = TcpTransitionServer(KEY, host="127.0.0.1", max_payload=MAX_PAYLOAD, stall_s=0.5,
                              limiter=RefusalLimiter(max_failures=10**9))
    yield srv
    srv.close()


_actors = iter(range(10**9))


@fuzz_settings(200)
@given(muts=mutations, header=st.one_of(st.none(), st.none(), st.dictionaries(
           st.sampled_from(["type", "seq", "oldest", "version"]), json_values, max_size=4)),
       raw=st.one_of(st.none(), st.none(), st.binary(max_size=100), st.just(LYING_SAFETENSORS)))
@example(muts=[("scalar", "action", 0, np.float32)], header=None, raw=None)  # TypeError (len of a 0-d array) before
@example(muts=[("drop", "task", 0.0, np.float16), ("extra-dim", "episode_id", 0.0, np.float16),  # found by the
               ("value", "reward", float("inf"), np.float16)], header=None, raw=None)  # 10 000-input drill: naming
@example(muts=[("drop", "task", 0.0, np.float16), ("scalar", "episode_id", 0.0, np.float16),  # the bad row raised
               ("value", "reward", float("nan"), np.float16)], header=None, raw=None)  # TypeError on odd id columns
def test_the_learner_stores_a_batch_only_when_every_column_is_sound(server: TcpTransitionServer, muts: list[Any],
                                                                   header: dict[str, Any] | None,
                                                                   raw: bytes | None) -> None:
    cols = transitions_to_columns([step(k, 1) for k in range(3)])
    for how, name, value, dtype in muts:
        mutate(cols, how, name, value, dtype)
    payload = raw if raw is not None else encode(cols)
    a, b = socket.socketpair()
    link = ActorLink(f"fuzz-{next(_actors)}", {}, a, "peer")
    out: list[Transition] = []
    head = {"type": "batch", "seq": 1} if header is None else header
    try:
        got = timed("fleet: learner batch", returning(server._handle, link, head, payload, out),
                    (FrameError, SpecError, ValueError))  # what receive() turns into dropping the link
    finally:
        a.close()
        b.close()
    if got is not None and out:
        for t in out:  # what the columns check let through passes the per-step check too
            dataclasses.replace(t)
        assert link.steps == len(out)


# --- weights into the actor ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], bytes]:
    folder = tmp_path_factory.mktemp("v3")
    (folder / "actor.safetensors").write_bytes(save({"w": np.ones((4, 3), np.float32)}))
    (folder / "actor.json").write_text('{"obs": 3}')
    return pack_weights(folder, 3)


WEIGHT_LIES = ["none", "truncate", "extend", "flip", "size", "sha256", "name", "version", "files", "entry", "dup"]


@fuzz_settings(200)
@given(how=st.sampled_from(WEIGHT_LIES), at=st.integers(0, 10**6), value=json_values | st.sampled_from(
    ["../x", "/etc/passwd", ".", "..", "a/b", "v1", "actor.json", "x" * 200, True, 0, -1, 2**70,
     hashlib.sha256(b"x").hexdigest()]))
@example(how="version", at=0, value=True)  # wrote the weights into a folder named vTrue before the fix
def test_an_actor_writes_weights_only_when_names_sizes_and_hashes_match(packed: tuple[dict[str, Any], bytes],
                                                                       how: str, at: int, value: Any) -> None:
    header, payload = {**packed[0], "files": [dict(f) for f in packed[0]["files"]]}, bytearray(packed[1])
    entry = header["files"][at % 2]
    if how == "truncate":
        payload = payload[: at % len(payload)]
    elif how == "extend":
        payload += b"\0" * (1 + at % 7)
    elif how == "flip":
        payload[at % len(payload)] ^= 1 << (at % 8)
    elif how in ("size", "name", "sha256"):
        entry[how] = value
    elif how in ("version", "files"):
        header[how] = value
    elif how == "entry":
        header["files"][at % 2] = value
    elif how == "dup":
        header["files"].append(dict(entry))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "weights"
        got = timed("fleet: actor weights", lambda: unpack_weights(header, bytes(payload), root), (FrameError,))
        written = sorted(p.relative_to(tmp) for p in Path(tmp).rglob("*"))
        if got is None:
            assert written in ([], [Path("weights")]), written  # nothing written, the actor keeps its weights
            assert how != "none"
            return
        assert got == root / f"v{header['version']}" and type(header["version"]) is int
        files, offset = header["files"], 0
        for f in files:
            data = bytes(payload[offset:offset + f["size"]])
            assert hashlib.sha256(data).hexdigest() == f["sha256"] and (got / f["name"]).read_bytes() == data
            offset += f["size"]
        assert offset == len(payload) and all(p.parent == got for p in got.iterdir())


# --- the actor's reader loop ---------------------------------------------------------------------------------
@fuzz_settings(200)
@given(stream=st.lists(st.one_of(frames, st.builds(
    lambda h: frame(json.dumps(h).encode()),
    st.fixed_dictionaries({"type": st.sampled_from(["ack", "weights", "resume"])},
                          optional={"seq": json_values, "version": json_values, "files": json_values}))),
    max_size=4))
def test_the_actors_reader_survives_any_frames_from_the_learner(stream: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        client = TcpActorClient(("127.0.0.1", 9), KEY, "a", Outbox(Path(tmp) / "out"), weights_dir=Path(tmp) / "w")
        client.outbox.add([step(0)])
        sock = feed(b"".join(stream))
        client._sock = sock
        timed("fleet: actor frames", lambda: client._read(sock), ())  # returns when the stream ends, never raises
        assert client._sock is None  # the connection is seen as gone: the next send reconnects


# --- a running learner endpoint over real sockets ------------------------------------------------------------
@pytest.fixture(scope="module")
def good(server: TcpTransitionServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpActorClient]:
    client = TcpActorClient(server.address, KEY, "good", Outbox(tmp_path_factory.mktemp("good")))
    client.connect()
    yield client
    client.close()


def noted(srv: TcpTransitionServer, before: int, peer: str) -> bool:
    """Whether the server logged refusing or dropping the connection from ``peer`` since ``before``."""
    return any(f"{peer}:" in r or f"({peer})" in r for r in srv.refused[before:])


@pytest.mark.slow
@fuzz_settings(100)  # each input is a real connection (~40 ms), some held open until refused
@given(auth=st.sampled_from(["none", "wrong-key", "right"]), data=frames, muts=mutations, hold=st.booleans())
def test_the_learner_endpoint_survives_hostile_connections_and_keeps_serving(
        server: TcpTransitionServer, good: TcpActorClient, auth: str, data: bytes, muts: list[Any], hold: bool) -> None:
    hold = hold and auth == "right"  # a silent peer before the handshake is the handshake timeout's (test_fleet_wire)
    t0, before = time.monotonic(), len(server.refused)
    sock = socket.create_connection(server.address, timeout=5)
    peer, name = f"127.0.0.1:{sock.getsockname()[1]}", f"hostile-{next(_actors)}"
    closer = threading.Timer(10.0, sock.close)  # unblocks a hang of the server, so the bounds below fail instead
    closer.start()
    try:
        try:
            if auth == "right":
                client_handshake(sock, KEY, {"actor": name})
                recv_frame(sock, max_payload=0)
                cols = transitions_to_columns([step(k, 2) for k in range(2)])
                for m in muts:
                    mutate(cols, *m)
                send_frame(sock, {"type": "batch", "seq": 1}, encode(cols))
            elif auth == "wrong-key":
                with pytest.raises(AuthError):
                    client_handshake(sock, WRONG_KEY, {"actor": name})
            sock.sendall(data)
            if not hold:
                sock.shutdown(socket.SHUT_WR)  # else the peer stays silent with the connection open
        except OSError:  # the server already hung up on us (it refused): what the checks below expect
            pass
        sent = time.monotonic()
        while not noted(server, before, peer) and time.monotonic() - sent < PER_INPUT_S:
            t = time.monotonic()
            server.receive(timeout=0.05)
            assert time.monotonic() - t < PER_INPUT_S, "one receive() call took too long"
            if hold and time.monotonic() - sent > 1.5:  # quiet, link open, every frame sound so far: kept
                break
        kept = not noted(server, before, peer)
        assert hold or not kept, f"{auth}: the connection from {peer} ended without a logged reason"
    finally:
        closer.cancel()
        sock.close()
    tally("fleet: learner endpoint (socket)", "accepted" if kept else "refused: connection dropped")
    assert time.monotonic() - t0 < PER_INPUT_S + 5.0
    assert server._thread.is_alive()
    k = good.outbox.next_seq
    good.send([step(k, 4242)])
    assert [t.step for t in served(server, 4242)] == [k], "the learner stopped serving a well-behaved actor"


def test_an_actor_gone_silent_mid_frame_is_dropped_and_the_learner_loop_goes_on(server: TcpTransitionServer) -> None:
    sock = socket.create_connection(server.address, timeout=5)
    client_handshake(sock, KEY, {"actor": "half-open"})
    recv_frame(sock, max_payload=0)  # resume
    closer = threading.Timer(10.0, sock.close)
    closer.start()
    try:
        sock.sendall(frame(b'{"type":"batch","seq":1}', payload_len=5000) + b"x" * 100)  # then nothing, link open
        t0 = time.monotonic()
        while "half-open" in server.links or not any("half-open" in r for r in server.refused):
            server.receive(timeout=0.05)
            assert time.monotonic() - t0 < 5.0, ("receive() hung on a half-open link", server.refused[-3:])
        assert any("stalled mid-frame" in r for r in server.refused if "half-open" in r), server.refused[-3:]
    finally:
        closer.cancel()
        sock.close()


# --- what an actor is told when it joins ---------------------------------------------------------------------
@fuzz_settings(200)
@given(resume=st.dictionaries(st.sampled_from(["type", "mark", "received", "number", "config", "marker"]),
                              json_values, max_size=6))
@example(resume={"type": "resume", "mark": 0, "number": "x"})  # int("x") raised later, in the actor, before the fix
def test_an_actor_joins_only_on_a_sound_resume_mark(tmp_path_factory: pytest.TempPathFactory,
                                                   resume: dict[str, Any]) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def learner() -> None:
        conn, _ = listener.accept()
        try:
            server_handshake(conn, KEY, timeout=PER_INPUT_S)
            send_frame(conn, resume)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1 << 16)
        except Exception:  # the actor refused and hung up
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    with tempfile.TemporaryDirectory() as tmp:
        client = TcpActorClient(listener.getsockname()[:2], KEY, "a", Outbox(Path(tmp) / "out"))
        try:
            got = timed("fleet: actor resume", returning(client.connect, PER_INPUT_S),
                        (FrameError, AuthError))
        finally:
            client.close()
            listener.close()
            thread.join(5)
        if got is not None:  # what the actor goes on to use is sound: its batch numbering and its run number
            for k in ("mark", "received", "number"):
                assert type(client.welcome.get(k, 0)) is int and 0 <= client.welcome.get(k, 0) < 10**12, client.welcome
            assert client.outbox.next_seq >= 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_a_tls_learner_refuses_silent_and_non_tls_peers_in_bounded_time_and_serves_on(tmp_path: Path) -> None:
    cert, key = tmp_path / "learner.crt", tmp_path / "learner.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    srv = TcpTransitionServer(KEY, host="127.0.0.1", tls=tls_server_context(cert, key), handshake_s=0.5,
                              limiter=RefusalLimiter(max_failures=10**9))
    try:
        for data in (b"", b"RRL1" + b"\0" * 40, b"\x16\x03\x01\x00\x05hello"):  # silent, plaintext, a broken hello
            with socket.create_connection(srv.address, timeout=5) as sock:
                sock.sendall(data)  # then nothing: the connection stays open
                peer, t0 = f"127.0.0.1:{sock.getsockname()[1]}", time.monotonic()
                while not noted(srv, 0, peer):
                    assert time.monotonic() - t0 < 5.0, f"{data!r}: the TLS handshake held its thread: {srv.refused}"
                    time.sleep(0.02)
        actor = TcpActorClient(srv.address, KEY, "tls", Outbox(tmp_path / "out"), tls=tls_client_context(cert))
        actor.connect()
        actor.send([step(0, 5)])
        assert [t.step for t in served(srv, 5)] == [0]
        time.sleep(1.0)  # longer than the handshake timeout: an idle link is not dropped (no timeout left on it)
        actor.send([step(1, 5)])
        assert [t.step for t in served(srv, 5)] == [1] and "tls" in srv.links
        actor.close()
    finally:
        srv.close()


FD_FLOOD = """
import os, resource, socket, sys, time
from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.tcp_transport import TcpTransitionServer
srv = TcpTransitionServer(bytes(range(32)), host="127.0.0.1", handshake_s=1.0)
waiting = socket.socket()  # its descriptor exists before the flood; connecting needs no new one
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(n) for n in os.listdir("/proc/self/fd")) + 8, hard))
filler = []
try:
    while True:
        filler.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
waiting.connect(srv.address)  # the learner's accept() now fails: no descriptor left (EMFILE)
time.sleep(1.0)
for fd in filler:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("accepting", srv._thread.is_alive(), flush=True)
client = TcpActorClient(srv.address, bytes(range(32)), "after", Outbox(sys.argv[1]))
client.connect(timeout=5)
print("served", srv.num_actors, "|".join(srv.refused), flush=True)
"""


def test_the_learner_endpoint_outlives_running_out_of_file_descriptors(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", FD_FLOOD, str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=120)
    assert "accepting True" in out.stdout, out.stdout + out.stderr[-2000:]  # the accept thread did not die
    assert out.returncode == 0 and "served 1" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "Too many open files" in out.stdout  # logged, with the reason
