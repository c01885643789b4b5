"""`gpumix-top --hub ADDR [--hub ADDR ...]`: attach to running hubs (Unix socket paths, tcp://HOST:PORT or
tls://HOST:PORT)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpumix.cli.common import OneLineParser, fail
from gpumix.hub.client import HubClient
from gpumix.wire import auth

NODE_TIMEOUT_S = 2.0  # a node that does not answer in this time shows as unreachable, the others go on


def add_hub_flags(parser: OneLineParser) -> None:
    parser.add_argument("--hub", action="append", metavar="ADDR",
                        help="attach to a running hub: a socket path (e.g. an ssh -L forward), tcp://HOST:PORT, or"
                             " tls://HOST:PORT for a hub started with --tls-cert (its certificate checked against"
                             " $GPUMIX_TLS_CA or the system's CAs); repeat for several nodes")
    parser.add_argument("--token-file", metavar="FILE",
                        help="the token for tcp:// and tls:// hubs (default: $GPUMIX_TOKEN or"
                             " $XDG_CONFIG_HOME/gpumix/token)")


def open_source(prog: str, args: argparse.Namespace) -> Any:
    """One HubClient, or a MultiHubSource over several; the token is checked now, not at the first poll."""
    if args.demo or args.sim or args.replay or args.record:
        fail(prog, "--hub attaches to running hubs: it cannot be combined with --demo, --sim, --replay or --record")
    token = None
    if any(auth.is_tcp(address) for address in args.hub):
        try:
            token = auth.read_token(args.token_file)
        except auth.TokenError as error:
            fail(prog, f"cannot use the token: {error}")
        for address in args.hub:
            if auth.is_tcp(address):
                try:
                    auth.tcp_address(address)
                except ValueError as error:
                    fail(prog, f"--hub {error}")
    clients = [HubClient(address, timeout_s=NODE_TIMEOUT_S, readonly=args.readonly, token=token)
               for address in args.hub]
    for client in clients:
        client.fresh = bool(args.once)  # a one-shot's busy GPUs' PCIe read now, not the slow schedule's last
    if len(clients) == 1:
        return clients[0]
    # the merge (and its rank tables) loads only for several hubs
    from gpumix.hub.multi import MultiHubSource

    return MultiHubSource(clients, addresses=list(args.hub))


def failure_reason(source: Any) -> str | None:
    """Why no snapshot came, one line: each hub client's last error (refused, TLS, no hub), or None."""
    clients = getattr(source, "sources", [source])
    reasons = [client.last_error for client in clients if getattr(client, "last_error", None)]
    return "; ".join(reasons) or None


def print_snapshot(snapshot: dict[str, Any] | None, as_json: bool, summary: Any, reason: str | None = None) -> int:
    if snapshot is None:
        print(reason or "no hub answered", file=sys.stderr)
        return 1
    if as_json:
        json.dump(snapshot, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:  # the summary holds hostnames, tiers and node names: never raw escape sequences
        from gpumix.tui.format import plain

        print("\n".join(plain(line, max_chars=10_000) for line in summary(snapshot).split("\n")))
    return 0
