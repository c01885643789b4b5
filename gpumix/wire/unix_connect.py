"""A Unix-socket connect that waits while the listener's backlog is full."""

from __future__ import annotations

import socket
import time


def connect_unix(sock: socket.socket, address: str, timeout_s: float) -> None:
    """connect(), waiting up to `timeout_s` while the hub's listen backlog is full: a socket with a timeout
    is non-blocking underneath, and Linux answers a full Unix backlog with EAGAIN at once where a blocking
    connect would wait (a hub busy with a burst of agents then looked absent to gpumix-top)."""
    deadline = time.monotonic() + timeout_s
    pause_s = 0.005
    while True:
        try:
            sock.connect(address)
            return
        except BlockingIOError:
            if time.monotonic() + pause_s > deadline:
                raise
            time.sleep(pause_s)
            pause_s = min(0.1, pause_s * 2)
