"""Loopback ports for tests, benches and the local Serve: a free TCP port, and a UDP port probe.

* :func:`free_port`: an unused TCP port on 127.0.0.1 (a local Serve's HTTP port, a test server's).
* :func:`udp_port_taken`: whether some process holds a UDP port (tests that check the server
  opened no socket, e.g. for an uploaded SDP file).
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """An unused TCP port on loopback (bound and released at once: the caller binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def udp_port_taken(port: int) -> bool:
    """True when some process holds UDP ``port`` on any local address (binding it fails).

    Nothing is sent: the probe binds a socket and closes it at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False
