"""Port probes for tests that check the server opened no socket (e.g. an uploaded SDP file)."""

from __future__ import annotations

import socket


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
