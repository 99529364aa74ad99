"""Free loopback ports for servers a test or a bench starts."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 right now (all bound at once, then released)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port() -> int:
    """One port free on 127.0.0.1 right now."""
    (port,) = free_ports(1)
    return port
