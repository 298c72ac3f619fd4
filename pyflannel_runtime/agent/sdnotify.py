"""The one systemd notification flanneld sends: READY=1 to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` to systemd; False when not started by systemd (no NOTIFY_SOCKET)."""
    address = os.environ.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True
