"""`gpumix hub --tcp`: TCP is off unless asked, loopback unless an address is given, always with the token.
`gpumix hub --allow-group/--allow-uid`: a root hub's Unix socket opened to named users (docs/power.md)."""

from __future__ import annotations

import argparse
import grp
import pwd
import sys
from typing import TYPE_CHECKING

from gpumix.cli.common import OneLineParser, fail
from gpumix.wire import auth
from gpumix.wire.paths import runtime_dir

if TYPE_CHECKING:  # ssl loads only when --tls-cert asks for it (~5 MB of RSS otherwise)
    import ssl


def add_tcp_flags(parser: OneLineParser) -> None:
    parser.add_argument("--tcp", metavar="[HOST:]PORT",
                        help="also listen on TCP (HOST defaults to 127.0.0.1); clients need the token")
    parser.add_argument("--token-file", metavar="FILE",
                        help="the shared token (default: $XDG_CONFIG_HOME/gpumix/token, created at first use)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve --tcp inside TLS with this certificate (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")


def tcp_settings(prog: str, args: argparse.Namespace
                 ) -> tuple[tuple[str, int] | None, str | None, ssl.SSLContext | None]:
    """(host, port), the token and the TLS context for `--tcp`, or Nones; one-line errors for the
    user's mistakes."""
    if bool(args.tls_cert) != bool(args.tls_key):
        fail(prog, "--tls-cert and --tls-key go together")
    if args.tls_cert and not args.tcp:
        fail(prog, "--tls-cert needs --tcp (TLS protects the TCP listener)")
    if not args.tcp:
        return None, None, None
    try:
        host, port = auth.split_host_port(args.tcp, default_host=auth.DEFAULT_TCP_HOST)
    except ValueError as error:
        fail(prog, f"--tcp {error}")
    try:
        token = auth.load_or_create_token(args.token_file)
    except OSError as error:  # TokenError included: group/other-readable, missing folder rights
        fail(prog, f"cannot use the token: {error}")
    tls = None
    if args.tls_cert:
        import ssl

        try:
            tls = auth.server_tls_context(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as error:  # missing file, not PEM, key and certificate apart
            fail(prog, f"cannot use the TLS certificate: {error}")
    if not auth.is_loopback(host) and tls is None:
        print(f"{prog}: warning: listening on {host}:{port} without TLS: the token is the only protection"
              " and the traffic is readable; use it on a trusted network only (or --tls-cert/--tls-key)",
              file=sys.stderr, flush=True)
    return (host, port), token, tls


def unix_socket_path(address: str) -> str:
    """The hub's own socket: $GPUMIX_HUB may name a TCP hub for agents; the hub still listens locally."""
    return str(runtime_dir() / "hub.sock") if auth.is_tcp(address) else address


def add_access_flags(parser: OneLineParser) -> None:
    parser.add_argument("--allow-group", metavar="GROUP",
                        help="let this group's members use the hub's Unix socket (set caps through a root hub);"
                             " the socket goes 0660 with this group")
    parser.add_argument("--allow-uid", action="append", metavar="USER",
                        help="let this user (name or uid) use the hub's Unix socket; repeatable;"
                             " the socket goes 0666 and the kernel's peer uid decides")


def access_settings(prog: str, args: argparse.Namespace) -> auth.UnixAccess | None:
    """The Unix socket's allow-list from --allow-group/--allow-uid, or None (owner only); one-line
    errors for unknown names and for a socket in the default (owner-only) folder."""
    if not args.allow_group and not args.allow_uid:
        return None
    if not getattr(args, "socket", None):
        fail(prog, "--allow-group/--allow-uid need --socket PATH in a folder those users can reach,"
                   " e.g. --socket /run/gpumix/hub.sock (the default folder is yours alone)")
    gids: set[int] = set()
    if args.allow_group:
        try:
            gids.add(int(args.allow_group) if args.allow_group.isdigit() else grp.getgrnam(args.allow_group).gr_gid)
        except KeyError:
            fail(prog, f"--allow-group: no group named {args.allow_group!r}")
    uids: set[int] = set()
    for user in args.allow_uid or []:
        try:
            uids.add(int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid)
        except KeyError:
            fail(prog, f"--allow-uid: no user named {user!r}")
    return auth.UnixAccess(allowed_uids=frozenset(uids), allowed_gids=frozenset(gids))
