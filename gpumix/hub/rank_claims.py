"""Who may hold a rank: a hello for a rank that a live process holds is refused (issue 10, item 4).

A named job's rank is one process at a time, whatever run id a hello gives: a hello under another run
id does not make a second rank 0 beside the live one. The process that holds the rank may say hello
again (its agent reconnected: the same pid on the same host, and over a Unix socket the same uid).
A restarted rank's new process takes the rank once the old one's connection has closed (a process
that exits, even killed, has its connection closed by the kernel). The pid a hello gives is the
agent's word, so whether that pid still runs is not asked: a fake pid would free a live rank.
A TCP rank whose machine vanished holds its rank until TCP keepalive closes it (about a minute,
gpumix.hub.keepalive).

What it may import: the standard library and gpumix.hub.ranks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpumix.hub.ranks import RankStream


def same_process(stream: RankStream, hello: dict[str, Any]) -> bool:
    """The hello comes from the process that holds this rank (its agent reconnected). `hello` is
    parse_hello's dict with the server's `peer_uid` (the kernel's word, None over TCP)."""
    return (stream.pid is not None and stream.pid == hello["pid"] and stream.hostname == hello["hostname"]
            and stream.peer_uid == hello.get("peer_uid"))


def live_holder(holders: Iterable[RankStream], hello: dict[str, Any]) -> RankStream | None:
    """The live process holding the rank this hello claims, or None when the hello may have it.
    `holders`: the streams of this rank (for a named job, under every run id; for an unnamed script,
    its own key's stream)."""
    for stream in holders:
        if stream.connected and not same_process(stream, hello):
            return stream
    return None
