"""The one reconnect mechanism of the actor <-> learner transports (this machine's socket and TCP).

An actor whose learner is away keeps acting and tries again now and then: :class:`Reconnect` paces the
attempts (at most one every :data:`RECONNECT_EVERY_S`, never blocking the caller), :func:`retry` retries a
connection until a deadline (an actor joining a learner that is not up yet). Pure standard library.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

RECONNECT_EVERY_S = 0.5
"""How often an actor whose learner is away tries again."""


class Reconnect:
    """Paced connection attempts: :meth:`attempt` runs ``connect`` when the last try is long enough ago."""

    def __init__(self, connect: Callable[[], object], errors: tuple[type[BaseException], ...],
                 on_error: Callable[[BaseException], None] | None = None, every_s: float | None = None) -> None:
        self.connect, self.errors, self.on_error = connect, errors, on_error
        self.every_s = RECONNECT_EVERY_S if every_s is None else every_s
        self._next_try = 0.0

    def attempt(self) -> bool:
        """True when ``connect`` ran without one of ``errors``; False when it failed or it is not time yet."""
        now = time.monotonic()
        if now < self._next_try:
            return False
        self._next_try = now + self.every_s
        try:
            self.connect()
        except self.errors as exc:
            if self.on_error is not None:
                self.on_error(exc)
            return False
        return True


def retry(connect: Callable[[], T], timeout: float, errors: tuple[type[BaseException], ...],
          every_s: float | None = None) -> T:
    """``connect()``, tried again every ``every_s`` while it raises one of ``errors``, for up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect()
        except errors:
            if time.monotonic() > deadline:
                raise
            time.sleep(RECONNECT_EVERY_S if every_s is None else every_s)
