"""Actor <-> learner transport on one machine: transitions stream in, versioned weights go out.

Kept behind two small interfaces (:class:`TransitionSender` / :class:`TransitionReceiver`) so that a
later fleet transport can replace it. This implementation avoids what HIL-SERL users hit (research/
lerobot_serl.md §5): any number of actors connect to one learner socket (not one actor only), payloads
are safetensors bytes over ``multiprocessing.connection`` with an HMAC handshake (never pickle), a
disconnected actor is noticed and dropped, and transitions are sent in small batches during the
episode, not as whole episodes.

Weights go through a folder: :class:`WeightsPublisher` writes ``v<N>/`` into a temp folder and renames
it into place (atomic), so a reader never sees half a checkpoint; that is the layout the ROS policy
node hot-swaps from (``model.safetensors`` + ``policy.json``). No torch import here.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Client, Connection, Listener, wait
from pathlib import Path
from typing import Any, Protocol

from robot_rl.core.spaces import SpecError
from robot_rl.core.transition import Transition
from robot_rl.learners.buffers import decode_transitions, encode_transitions

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
"""Largest accepted transition batch (a corrupt length header must not allocate gigabytes)."""
VERSION_DIR = re.compile(r"^v(\d+)$")


class TransitionSender(Protocol):
    """Actor side: send transitions as they happen."""

    def send(self, transitions: Sequence[Transition]) -> None:
        """Send a batch (may be one step)."""

    def close(self) -> None:
        """Disconnect."""


class TransitionReceiver(Protocol):
    """Learner side: collect what the actors sent."""

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """Everything that arrived (waiting up to ``timeout`` seconds for the first batch)."""
        ...

    def close(self) -> None:
        """Stop accepting and disconnect everybody."""


class SocketTransitionServer:
    """Learner end: a local socket many actors connect to. ``address`` / ``authkey`` go to the actors."""

    def __init__(self, address: str | None = None, authkey: bytes | None = None) -> None:
        self.authkey = authkey or secrets.token_bytes(32)
        self._listener = Listener(address, family="AF_UNIX", authkey=self.authkey)
        self.address: str = str(self._listener.address)
        self._conns: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.dropped: list[str] = []
        """Why connections were dropped (disconnects, malformed payloads)."""
        self._thread = threading.Thread(target=self._accept, name="transition-accept", daemon=True)
        self._thread.start()

    @property
    def num_actors(self) -> int:
        """Actors currently connected."""
        with self._lock:
            return len(self._conns)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):  # closed, or a client failed the handshake
                if self._closed:
                    return
                continue
            except Exception:  # AuthenticationError: a stranger; keep serving the others
                continue
            with self._lock:
                self._conns.append(conn)

    def receive(self, timeout: float = 0.0) -> list[Transition]:
        """Transitions from every actor that sent something (waits up to ``timeout`` for the first)."""
        with self._lock:
            conns = list(self._conns)
        out: list[Transition] = []
        if not conns:
            return out
        for conn in wait(conns, timeout):
            assert isinstance(conn, Connection)
            while True:
                try:
                    out.extend(decode_transitions(conn.recv_bytes(MAX_MESSAGE_BYTES)))
                except (EOFError, OSError) as exc:
                    self._drop(conn, f"actor disconnected ({type(exc).__name__})")
                    break
                except SpecError as exc:
                    self._drop(conn, f"malformed batch refused: {exc}")
                    break
                if not conn.poll(0):
                    break
        return out

    def _drop(self, conn: Connection, why: str) -> None:
        self.dropped.append(why)
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)
        conn.close()

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


class SocketTransitionClient:
    """Actor end of :class:`SocketTransitionServer`."""

    def __init__(self, address: str, authkey: bytes) -> None:
        self._conn = Client(address, family="AF_UNIX", authkey=authkey)

    def send(self, transitions: Sequence[Transition]) -> None:
        """Send a batch of transitions (safetensors bytes)."""
        if transitions:
            self._conn.send_bytes(encode_transitions(transitions))

    def close(self) -> None:
        """Disconnect (the learner notices and drops this actor)."""
        self._conn.close()


# ---------------------------------------------------------------------------- weights
def list_versions(folder: str | Path, marker: str = "policy.json") -> list[tuple[int, Path]]:
    """Complete ``v<N>/`` folders (those holding ``marker``), oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if (m := VERSION_DIR.match(p.name)) and (p / marker).is_file()]
    return sorted(found)


class WeightsPublisher:
    """Writes numbered weight folders ``v<N>/`` atomically and keeps the newest ``keep``."""

    def __init__(self, folder: str | Path, keep: int = 3, marker: str = "policy.json") -> None:
        if keep < 1:
            raise ValueError(f"keep: must be >= 1, got {keep}")
        self.folder, self.keep, self.marker = Path(folder), keep, marker
        self.folder.mkdir(parents=True, exist_ok=True)
        versions = list_versions(self.folder, marker)
        self.version = versions[-1][0] if versions else 0
        """Latest published version (a restarted learner continues the numbering)."""

    def publish(self, write: Callable[[Path, int], Any]) -> int:
        """Call ``write(tmp_folder, version)`` and move the result to ``v<version>/``; returns the version."""
        version = self.version + 1
        tmp = self.folder / f".v{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            write(tmp, version)
            if not (tmp / self.marker).is_file():
                raise FileNotFoundError(f"the writer left no {self.marker} in {tmp}")
            os.replace(tmp, self.folder / f"v{version}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.version = version
        for _, old in list_versions(self.folder, self.marker)[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return version

    def publish_policy(self, policy: Any) -> int:
        """Publish a :class:`robot_rl.policies.base.Policy` (its ``version`` is set to the new number)."""
        def write(tmp: Path, version: int) -> None:
            policy.version = version
            policy.save(tmp)
        return self.publish(write)


class WeightsWatcher:
    """Actor side: reports a newer complete ``v<N>/`` folder once."""

    def __init__(self, folder: str | Path, current: int = 0, marker: str = "policy.json") -> None:
        self.folder, self.current, self.marker = Path(folder), int(current), marker

    def poll(self) -> tuple[int, Path] | None:
        """(version, folder) of the newest version above the current one, or None."""
        versions = list_versions(self.folder, self.marker)
        if versions and versions[-1][0] > self.current:
            self.current = versions[-1][0]
            return versions[-1]
        return None
