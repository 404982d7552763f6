"""What the fleet's TCP transport insists on: TLS off this machine, private secret files, refused peers slowed down.

* :func:`check_transport`: a learner address that is not loopback (``0.0.0.0``, a LAN or public address, a
  host name) needs TLS, since a robot's observations and the policy's weights would otherwise cross the
  network readable by anyone on the path. The opt-out is explicit: ``allow_plaintext=True`` or the
  environment variable :data:`PLAINTEXT_ENV` (``robot-rl online ... --insecure`` sets it), and it logs a
  loud warning. Loopback addresses stay plaintext-capable (nothing leaves the machine).
* :func:`check_secret_file`: the run's shared secret and the TLS private key are refused when group or
  others may read (or write) them, as ssh refuses a private key; the error names the ``chmod`` to run.
* :class:`RefusalLimiter`: a peer (by IP address) whose handshakes fail ``max_failures`` times within
  ``window_s`` seconds is not served at all (its connections are closed unread) for ``block_s`` seconds,
  so guessing the secret or hammering the TLS handshake costs the learner next to nothing.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path

log = logging.getLogger(__name__)

PLAINTEXT_ENV = "ROBOT_RL_ALLOW_PLAINTEXT"
"""Set to ``1`` to allow plaintext TCP to or from a non-loopback address (logged loudly)."""


class InsecureTransportError(ValueError):
    """Plaintext TCP on a non-loopback address without the explicit opt-out."""


class InsecureFileError(ValueError):
    """A secret file (shared secret, TLS private key) that group or others may read or write."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost``, 127.0.0.0/8, ``::1``); host names are not resolved."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name (or "" / "0.0.0.0"-style wildcards are handled above): assume the network
        return False


def plaintext_allowed(allow_plaintext: bool | None = None) -> bool:
    """The opt-out: ``allow_plaintext`` when given, else whether :data:`PLAINTEXT_ENV` is set to a true value."""
    if allow_plaintext is not None:
        return allow_plaintext
    return os.environ.get(PLAINTEXT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_transport(host: str, tls: bool, role: str, allow_plaintext: bool | None = None) -> None:
    """Refuse plaintext TCP on a non-loopback ``host`` unless opted out (then warn loudly).

    ``role`` names the endpoint in the messages (e.g. ``"learner listening on 0.0.0.0:7450"``).
    Raises InsecureTransportError.
    """
    if tls or is_loopback(host):
        return
    if not plaintext_allowed(allow_plaintext):
        raise InsecureTransportError(
            f"{role}: {host or 'every interface'} is not a loopback address, so the fleet's TCP must be TLS: give "
            f"the learner fleet.tls_cert and fleet.tls_key (actors: --tls-ca / fleet.tls_ca). To send robot data "
            f"and weights unencrypted anyway, opt out explicitly with {PLAINTEXT_ENV}=1 or --insecure")
    log.warning("INSECURE: %s: plaintext TCP on the non-loopback address %s (%s set): transitions and weights "
                "cross the network unencrypted; anyone on the path can read them. Configure TLS "
                "(fleet.tls_cert / fleet.tls_key) for real deployments.", role, host or "0.0.0.0", PLAINTEXT_ENV)


def check_secret_file(path: str | Path, what: str = "secret") -> Path:
    """``path``, refused (InsecureFileError) when group or others may read or write it; FileNotFoundError if absent."""
    path = Path(path)
    mode = path.stat().st_mode
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InsecureFileError(
            f"{path}: this {what} is accessible by group or others (mode {stat.S_IMODE(mode):04o}); it must be "
            f"readable by its owner only. Run: chmod 600 {path}")
    return path


class RefusalLimiter:
    """Per-peer back-off after failed handshakes: ``max_failures`` within ``window_s`` blocks the peer ``block_s``.

    Peers are keyed by IP address (not port: a new connection gets a new port). Thread-safe; remembers at most
    ``max_peers`` addresses (the least recently failing ones are forgotten first).
    """

    def __init__(self, max_failures: int = 5, window_s: float = 60.0, block_s: float | None = None,
                 max_peers: int = 4096) -> None:
        if max_failures < 1 or not window_s > 0:
            raise ValueError("max_failures must be >= 1 and window_s > 0")
        self.max_failures, self.window_s = max_failures, window_s
        self.block_s = window_s if block_s is None else block_s
        self.max_peers = max_peers
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._blocked: dict[str, float] = {}
        self.turned_away: dict[str, int] = {}
        """Connections closed unserved per blocked peer (during its current block)."""
        self._lock = threading.Lock()

    def blocked(self, peer: str, now: float | None = None) -> bool:
        """Whether ``peer`` is refused unserved now (counts the connection when it is)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            until = self._blocked.get(peer)
            if until is None:
                return False
            if now >= until:
                del self._blocked[peer]
                self.turned_away.pop(peer, None)
                return False
            self.turned_away[peer] = self.turned_away.get(peer, 0) + 1
            return True

    def failed(self, peer: str, now: float | None = None) -> bool:
        """Record a failed handshake of ``peer``; True when this failure starts a block."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._failures.pop(peer, None) or deque()
            times.append(now)
            while times and now - times[0] > self.window_s:
                times.popleft()
            if len(times) >= self.max_failures:
                self._blocked[peer] = now + self.block_s
                return True
            self._failures[peer] = times
            while len(self._failures) > self.max_peers:
                self._failures.popitem(last=False)
            return False
