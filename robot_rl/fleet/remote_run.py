"""An actor on another machine joins a learner: the run mirrored into a local folder (config, weights, outbox).

Every remote actor joins this way: the actor process (:func:`~robot_rl.learners.actor_process.run_remote_actor`),
Ray's actors and the ROS policy node. The transport underneath is :mod:`robot_rl.fleet.tcp_transport`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robot_rl.fleet.delivery import Outbox
from robot_rl.fleet.reconnect import retry
from robot_rl.fleet.tcp_actor import TcpActorClient
from robot_rl.fleet.wire import CONFIG_FILE, AuthError, FrameError


class RemoteRun:
    """A learner on another machine, mirrored into a local run folder: how every remote actor joins one.

    The folder (:func:`actor_folder`: one per run secret) holds the run's config once joined, the learner's
    weights (in shared memory, :func:`weights_in_memory`) and the outbox of unacknowledged batches
    (``outbox/<name>``, journaled); :attr:`client` sends the actor's transitions. ``weights="ray"``: another
    path (Ray's object store) fills ``weights/`` and the learner sends none. Without ``tls`` the learner must be
    on loopback unless ``allow_plaintext`` (:func:`~robot_rl.fleet.security.check_transport`). Used by the actor process
    (:func:`~robot_rl.learners.actor_process.run_remote_actor`), Ray's actors and the ROS policy node.
    """

    def __init__(self, address: tuple[str, int], key: bytes, workdir: str | Path, name: str,
                 tls: ssl.SSLContext | None = None, info: dict[str, Any] | None = None,
                 resolve: Callable[[], tuple[str, int]] | None = None, weights: str = "tcp",
                 allow_plaintext: bool | None = None) -> None:
        self.folder = actor_folder(workdir, key)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.mirror = weights_in_memory(self.folder)
        self.client = TcpActorClient(address, key, name, Outbox(self.folder / "outbox" / name, journal=True),
                                     info={**(info or {}), "weights": weights}, tls=tls,
                                     weights_dir=self.folder / "weights", resolve=resolve,
                                     allow_plaintext=allow_plaintext)
        self.error: str | None = None
        """Why a background join gave up (the secret was refused, no config came); None otherwise."""

    def join(self, timeout: float) -> None:
        """Connect (retrying while the learner is unreachable, up to ``timeout`` s) and write the run's config.

        Raises AuthError when the secret is refused, OSError when no learner answered in time, ValueError when
        the learner sent no config.
        """
        retry(self.client.connect, timeout, (OSError, FrameError))
        config = self.client.welcome.get("config")
        if not isinstance(config, str):
            self.client.close()
            raise ValueError("the learner at {}:{} sent no run config".format(*self.client.address))
        tmp = self.folder / f".{CONFIG_FILE}.tmp"
        tmp.write_text(config, encoding="utf-8")
        os.replace(tmp, self.folder / CONFIG_FILE)

    def join_in_background(self) -> None:
        """:meth:`join` on a thread, retrying for as long as it takes (a robot acts alone meanwhile)."""
        def join() -> None:
            try:
                self.join(float("inf"))
            except (AuthError, ValueError) as exc:
                self.error = f"the learner refused this actor: {exc}" if isinstance(exc, AuthError) else str(exc)

        threading.Thread(target=join, name="remote-run-join", daemon=True).start()

    @property
    def number(self) -> int:
        """The learner's run-wide number for this actor's name (after :meth:`join`)."""
        return int(self.client.welcome.get("number", 0))

    def close(self) -> None:
        """Disconnect (unacknowledged batches stay in the outbox) and free the weights kept in memory."""
        self.client.close()
        if self.mirror is not None:
            shutil.rmtree(self.mirror, ignore_errors=True)


def actor_folder(workdir: str | Path, key: bytes) -> Path:
    """Where an actor on another machine keeps one run's config, weights, log and outbox."""
    return Path(workdir) / f"run-{hashlib.sha256(key).hexdigest()[:12]}"


def weights_in_memory(folder: Path) -> Path | None:
    """Point ``folder/weights`` at a folder in shared memory (``/dev/shm``) when the machine has one; returns it.

    An actor's weights are a cache of the learner's (it sends the newest again when the actor rejoins), so
    they need not survive a reboot; written to RAM, a 40 MB version is on hand in ~20 ms instead of the
    ~100 ms a disk write takes.
    """
    shm = Path("/dev/shm")
    link = folder / "weights"
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        return None
    target = shm / f"robot_rl_{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]}"
    target.mkdir(exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.symlink_to(target, target_is_directory=True)
    return target
