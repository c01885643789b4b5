"""Who may talk to a hub: the token file, TCP hellos, signed controls, peer uids.

A hub listens on its owner-only Unix socket; TCP is off unless asked. Every
TCP connection presents the shared token in its hello. A TCP client also
sends a nonce, and the hub answers with a `welcome` carrying its own; each
control it sends then carries a strictly increasing counter and an
HMAC-SHA256 (keyed by the token) over both nonces, the counter and the
request's canonical JSON. A replayed or altered control is refused. With
`tls://HOST:PORT` the same protocol runs inside TLS (the hub started with
--tls-cert/--tls-key; clients verify its certificate against $GPUMIX_TLS_CA,
or the system's CAs), so the traffic is private too.

Standard library only: the agent imports this inside training processes.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpumix.wire.unix_connect import connect_unix

if TYPE_CHECKING:
    import ssl

# ssl, hashlib, hmac and secrets load only where TCP or TLS is used: they map OpenSSL's libcrypto and
# libssl, ~5 MB of RSS that a client, a hub or an agent on the Unix socket never needs (issue 13).

TOKEN_ENV = "GPUMIX_TOKEN"
TCP_SCHEME = "tcp://"
TLS_SCHEME = "tls://"
TLS_CA_ENV = "GPUMIX_TLS_CA"  # the CA file (or the hub's own certificate) clients trust
DEFAULT_TCP_HOST = "127.0.0.1"
NONCE_BYTES = 16
CONTROL_TYPES = {"power", "replan", "supervisor"}  # requests that change something (or could)


class TokenError(OSError):
    """The token file is missing, unsafe or unusable; str() is a one-line reason."""


# -- the token file ------------------------------------------------------------------------


def default_token_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpumix" / "token"


def check_token_file(path: Path) -> None:
    """Refuse a token that group or others could read (or change)."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise TokenError(f"{path} is not a regular file")
    if info.st_mode & 0o077:
        raise TokenError(f"{path} is readable by group/others (mode {stat.S_IMODE(info.st_mode):o}):"
                         f" run `chmod 600 {path}`")


def read_token(path: str | Path | None = None) -> str:
    """The token: $GPUMIX_TOKEN, else the token file (which must exist and be owner-only)."""
    if path is None and os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    token_path = Path(path) if path is not None else default_token_path()
    try:
        check_token_file(token_path)
        token = token_path.read_text().strip()
    except FileNotFoundError:
        raise TokenError(f"no token file at {token_path}: copy the hub's token there (mode 600)"
                         f" or set {TOKEN_ENV}") from None
    if len(token) < 32:
        raise TokenError(f"{token_path} holds no usable token (at least 32 characters)")
    return token


def load_or_create_token(path: str | Path | None = None) -> str:
    """The hub's token, created at first use: 32 random bytes as hex, 0600 in a 0700 folder."""
    token_path = Path(path) if path is not None else default_token_path()
    if not token_path.exists():
        token_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return read_token(token_path)  # another process created it just now
        import secrets

        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    return read_token(token_path)


def tokens_match(given: Any, token: str) -> bool:
    import hmac

    return isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())


# -- addresses ------------------------------------------------------------------------------


def is_tcp(address: str) -> bool:
    """A network address (plain or TLS): the token and signed controls apply."""
    return address.startswith((TCP_SCHEME, TLS_SCHEME))


def is_tls(address: str) -> bool:
    return address.startswith(TLS_SCHEME)


def split_host_port(text: str, default_host: str | None = None) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT' or (with a default host) 'PORT' -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        if default_host is None:
            raise ValueError(f"{text!r}: expected HOST:PORT")
        host = default_host
    host = host.strip("[]") or (default_host or "")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected [HOST:]PORT with a port from 0 to 65535")
    return host, int(port)


def tcp_address(address: str) -> tuple[str, int]:
    return split_host_port(address.split("://", 1)[1])


def client_tls_context() -> ssl.SSLContext:
    """Verify the hub's certificate and name: against $GPUMIX_TLS_CA if set, else the system's CAs."""
    import ssl

    return ssl.create_default_context(cafile=os.environ.get(TLS_CA_ENV) or None)


def server_tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    import ipaddress  # a TCP hub's concern: a Unix-socket client does without it

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_socket(address: str, timeout_s: float) -> socket.socket:
    """A connected socket to a hub: `tcp://HOST:PORT` or a Unix socket path."""
    if is_tcp(address):
        host, port = tcp_address(address)
        sock = socket.create_connection((host, port), timeout=timeout_s)
        if not is_tls(address):
            return sock
        try:
            return client_tls_context().wrap_socket(sock, server_hostname=host)
        except BaseException:  # ssl.SSLError (a bad certificate) is an OSError: callers back off and say why
            sock.close()
            raise
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        connect_unix(sock, address, timeout_s)
    except BaseException:
        sock.close()
        raise
    return sock


# -- Unix peers -----------------------------------------------------------------------------


def peer_credentials(sock: socket.socket) -> tuple[int, int] | None:
    """(uid, gid) of the process at the other end of a Unix socket (Linux SO_PEERCRED), or None."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        _pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return None
    return uid, gid


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED), or None."""
    credentials = peer_credentials(sock)
    return None if credentials is None else credentials[0]


def groups_of_uid(uid: int) -> set[int]:
    """The uid's groups from the system's user database (primary and supplementary); empty if unknown.

    SO_PEERCRED gives only the peer's primary gid, so supplementary groups are looked up by uid."""
    try:
        entry = pwd.getpwuid(uid)
        return set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except (KeyError, OSError):
        return set()


def uid_label(uid: int | None) -> str:
    """A peer as the audit names it: `alice (uid 1000)` (the name from the user database, never from the peer)."""
    if uid is None:
        return "local peer (uid unknown)"
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


class UnixAccess(NamedTuple):  # not a dataclass: a one-shot's import of this module loads no dataclasses (issue 13)
    """Who besides the hub's owner may use its Unix socket (`gpumix hub --allow-group/--allow-uid`).

    A root hub that sets caps for unprivileged users: the socket goes group-accessible
    (0660, group `socket_gid`) with only --allow-group, or connectable by all (0666) once
    a uid is allowed; either way SO_PEERCRED decides who gets in, and everyone else is refused."""

    allowed_uids: frozenset[int] = frozenset()
    allowed_gids: frozenset[int] = frozenset()

    @property
    def socket_gid(self) -> int | None:
        return min(self.allowed_gids) if len(self.allowed_gids) == 1 else None

    @property
    def socket_mode(self) -> int:
        if self.allowed_uids or len(self.allowed_gids) > 1:
            return 0o666  # file modes cannot name single uids: SO_PEERCRED is the gate
        return 0o660 if self.allowed_gids else 0o600


def peer_refusal(uid: int | None, own_uid: int | None = None, gid: int | None = None,
                 access: UnixAccess | None = None,
                 groups_of: Callable[[int], set[int]] = groups_of_uid) -> str | None:
    """Why a Unix peer is refused, or None to let it in: the owner, an allowed uid, or a member
    (primary or supplementary) of an allowed group."""
    own = os.getuid() if own_uid is None else own_uid
    if access is None or not (access.allowed_uids or access.allowed_gids):
        if uid is None or uid == own:  # no SO_PEERCRED: the 0600 socket is the guard
            return None
        return f"peer uid {uid} is not the hub's owner (uid {own})"
    if uid is None:  # the socket is open to others: without credentials nobody is let in
        return "the peer's uid is unknown (no SO_PEERCRED): refused on a shared socket"
    if uid == own or uid in access.allowed_uids:
        return None
    if gid in access.allowed_gids or groups_of(uid) & access.allowed_gids:
        return None
    return f"peer uid {uid} is neither the hub's owner (uid {own}) nor allowed (--allow-uid/--allow-group)"


# -- signed controls --------------------------------------------------------------------------


def new_nonce() -> str:
    import secrets

    return secrets.token_hex(NONCE_BYTES)


def canonical(request: dict[str, Any]) -> bytes:
    """The request as signed: sorted keys, no spaces, without `mac` (and the frame's `v`)."""
    body = {key: value for key, value in request.items() if key not in ("mac", "v")}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
                      default=str).encode()


def control_mac(token: str, server_nonce: str, client_nonce: str, counter: int, request: dict[str, Any]) -> str:
    import hashlib
    import hmac

    message = b"\n".join([server_nonce.encode(), client_nonce.encode(), str(counter).encode(), canonical(request)])
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


class ControlSigner:
    """A client's side: counts and signs each control on one connection."""

    def __init__(self, token: str, client_nonce: str, server_nonce: str) -> None:
        self.token, self.client_nonce, self.server_nonce = token, client_nonce, server_nonce
        self.counter = 0

    def sign(self, request: dict[str, Any]) -> dict[str, Any]:
        self.counter += 1
        signed = {key: value for key, value in request.items() if key != "mac"}
        signed["counter"] = self.counter
        signed["mac"] = control_mac(self.token, self.server_nonce, self.client_nonce, self.counter, signed)
        return signed


class ControlVerifier:
    """The hub's side: one per TCP client connection."""

    def __init__(self, token: str, client_nonce: str, server_nonce: str) -> None:
        self.token, self.client_nonce, self.server_nonce = token, client_nonce, server_nonce
        self.last_counter = 0

    def refusal(self, request: dict[str, Any]) -> str | None:
        """Why this control is refused, or None (and then its counter is used up)."""
        counter, mac = request.get("counter"), request.get("mac")
        if isinstance(counter, bool) or not isinstance(counter, int) or not isinstance(mac, str):
            return "a control over TCP must carry a counter and a mac"
        try:
            expected = control_mac(self.token, self.server_nonce, self.client_nonce, counter, request)
        except ValueError:
            return "the control cannot be signed (not finite JSON)"
        import hmac

        if not hmac.compare_digest(mac.encode(), expected.encode()):
            return "bad mac: the control was altered or signed with another token"
        if counter <= self.last_counter:
            return f"replayed control (counter {counter}, last {self.last_counter})"
        self.last_counter = counter
        return None


def client_hello(token: str | None, client_nonce: str | None, readonly: bool) -> dict[str, Any]:
    hello: dict[str, Any] = {"type": "hello", "role": "client"}
    if token is not None:
        hello["token"] = token
    if client_nonce is not None:
        hello["nonce"] = client_nonce
    if readonly:
        hello["readonly"] = True
    return hello


def tcp_peer_label(address: Any) -> str:
    """A TCP peer as the audit names it: whoever holds the token, from where (`token@HOST:PORT`)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = f"[{address[0]}]" if ":" in str(address[0]) else str(address[0])
        return f"token@{host}:{address[1]}"
    return "token@unknown"
