"""A free loopback UDP port for a test's emulator or link (the OS picks it, so parallel tests never collide)."""

from __future__ import annotations

import socket


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nothing is bound to right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_udp_ports(n: int) -> list[int]:
    """``n`` distinct free UDP ports on 127.0.0.1 (held together while picked, so they differ)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()
