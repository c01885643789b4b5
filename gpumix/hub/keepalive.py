"""TCP keepalive on the hub's accepted connections: a peer whose machine vanished (power cut, cable,
a crashed VM) sends no FIN, so without probes its connection and the rank it holds would stay until
the 30-minute idle timeout, and a relaunch of that rank under a new run id would be refused meanwhile
(gpumix.hub.rank_claims). With these options the kernel closes the connection about
KEEPALIVE_BOUND_S after the peer stopped answering, and the rank shows gone.

What it bounds: a silent connection to a dead peer. A live peer that is merely silent (an eval, a
checkpoint) answers the probes and keeps its connection until the idle timeout. Where the platform
lacks an option, the system's default stands (on Linux two hours before the first probe).

What it may import: the standard library."""

from __future__ import annotations

import contextlib
import socket

KEEPALIVE_IDLE_S = 30  # silence before the first probe
KEEPALIVE_INTERVAL_S = 10  # between unanswered probes
KEEPALIVE_PROBES = 3  # unanswered probes before the kernel closes the connection
KEEPALIVE_BOUND_S = KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_PROBES  # about a minute


def tcp_keepalive_options() -> list[tuple[int, int]]:
    """(option, value) at IPPROTO_TCP that this platform has: Linux names the idle time TCP_KEEPIDLE,
    macOS TCP_KEEPALIVE."""
    idle_option = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    wanted = [(idle_option, KEEPALIVE_IDLE_S), (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_S),
              (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES)]
    return [(option, value) for option, value in wanted if option is not None]


def enable_keepalive(sock: socket.socket) -> None:
    """Turn on keepalive with short probes; an option the socket refuses leaves that one at its default
    (the connection works either way)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in tcp_keepalive_options():
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
