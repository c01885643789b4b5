"""A root hub that unprivileged users can reach to set caps: `gpumix hub --socket PATH --allow-group GROUP`
(or --allow-uid USER). The decision by uid/gid, the socket's real mode and group, the server path with an
injected peer-credential function, and (as root) real peers of other uids in forked children."""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumix.cli.common import OneLineParser
from gpumix.cli.remote import access_settings, add_access_flags
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.server import HubServer
from gpumix.power.caps import PRIVILEGE_HINT, PowerController
from gpumix.wire import auth, protocol
from tests.conftest import FixedHostSampler, wait_until

NOGROUP = grp.getgrnam("nogroup").gr_gid if "nogroup" in {g.gr_name for g in grp.getgrall()} else 65534
STAFF = 4321  # a group id no real user here is in


@pytest.fixture
def folder() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # short: Unix socket paths are limited
    os.chmod(path, 0o755)  # like /run: others may pass through
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hub(demo_hardware: Any, tmp_path: Path) -> Hub:
    hub = Hub(demo_hardware, host_sampler=FixedHostSampler())
    hub.power = PowerController(demo_hardware.backend, audit_path=tmp_path / "audit.jsonl")
    hub.tick()
    return hub


# -- the decision ---------------------------------------------------------------------------------


def test_who_is_let_in() -> None:
    access = auth.UnixAccess(allowed_uids=frozenset({4242}), allowed_gids=frozenset({STAFF}))
    no_groups: Any = lambda uid: set()  # noqa: E731

    def refusal(uid: int | None, gid: int | None, groups: Any = no_groups) -> str | None:
        return auth.peer_refusal(uid, own_uid=0, gid=gid, access=access, groups_of=groups)

    assert refusal(0, 0) is None  # the owner
    assert refusal(4242, 4242) is None  # an allowed uid
    assert refusal(5000, STAFF) is None  # primary group (SO_PEERCRED's gid)
    assert refusal(5001, 5001, lambda uid: {5001, STAFF}) is None  # a supplementary group, looked up by uid
    refused = refusal(5002, 5002, lambda uid: {5002})
    assert refused == "peer uid 5002 is neither the hub's owner (uid 0) nor allowed (--allow-uid/--allow-group)"
    assert "unknown" in refusal(None, None)  # a shared socket never lets in a peer it cannot name
    # without an allow-list, as before: the owner only
    assert auth.peer_refusal(5000, own_uid=0, gid=STAFF) == "peer uid 5000 is not the hub's owner (uid 0)"


def test_supplementary_groups_come_from_the_user_database() -> None:
    root_groups = auth.groups_of_uid(0)
    assert 0 in root_groups
    access = auth.UnixAccess(allowed_gids=frozenset({0}))
    assert auth.peer_refusal(0, own_uid=4242, gid=4242, access=access) is None  # gid 0 through the database
    assert auth.groups_of_uid(987_654) == set()  # no such user: no groups, no way in
    assert auth.peer_refusal(987_654, own_uid=0, gid=987_654, access=access) is not None


def test_socket_mode_follows_the_allow_list() -> None:
    assert auth.UnixAccess().socket_mode == 0o600
    group_only = auth.UnixAccess(allowed_gids=frozenset({STAFF}))
    assert (group_only.socket_mode, group_only.socket_gid) == (0o660, STAFF)
    assert auth.UnixAccess(allowed_uids=frozenset({4242})).socket_mode == 0o666


# -- the socket on disk ------------------------------------------------------------------------------


def test_an_allowed_group_gets_a_group_socket_in_a_folder_it_can_reach(hub: Hub, folder: str) -> None:
    path = os.path.join(folder, "run", "hub.sock")  # the folder does not exist yet: created for the group
    server = HubServer(hub, path, access=auth.UnixAccess(allowed_gids=frozenset({NOGROUP})))
    server.start()
    try:
        info = os.stat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660 and info.st_gid == NOGROUP
        parent = os.stat(os.path.dirname(path))
        assert stat.S_IMODE(parent.st_mode) == 0o750 and parent.st_gid == NOGROUP
    finally:
        server.stop()
    uid_server = HubServer(hub, os.path.join(folder, "uid.sock"), access=auth.UnixAccess(allowed_uids=frozenset({4242})))
    uid_server.start()
    try:
        assert stat.S_IMODE(os.stat(uid_server.socket_path).st_mode) == 0o666
    finally:
        uid_server.stop()


def test_a_folder_that_keeps_them_out_is_refused_at_start(hub: Hub, folder: str) -> None:
    private = Path(folder) / "private"
    private.mkdir(mode=0o700)
    server = HubServer(hub, str(private / "hub.sock"), access=auth.UnixAccess(allowed_gids=frozenset({NOGROUP})))
    with pytest.raises(PermissionError, match="keeps the allowed users out.*--socket /run/gpumix/hub.sock"):
        server.start()
    assert not (private / "hub.sock").exists()


# -- the server path, peers injected ------------------------------------------------------------------------


def served_by(hub: Hub, folder: str, uid: int, gid: int) -> HubServer:
    server = HubServer(hub, os.path.join(folder, f"hub{uid}.sock"), access=auth.UnixAccess(allowed_gids=frozenset({STAFF})),
                       peer_credentials=lambda sock: (uid, gid))
    server.start()
    return server


def test_a_member_sets_caps_and_the_audit_names_its_uid(hub: Hub, folder: str, tmp_path: Path) -> None:
    server = served_by(hub, folder, uid=4242, gid=STAFF)
    client = HubClient(server.socket_path, timeout_s=3)
    try:
        assert client.snapshot() is not None
        reply = client.control({"type": "power", "action": "set", "gpus": [1], "watts": 150, "user": "root"})
        assert reply["ok"], reply
    finally:
        client.close()
        server.stop()
    line = json.loads((tmp_path / "audit.jsonl").read_text())
    assert (line["user"], line["claimed_user"], line["new_w"]) == ("uid 4242", "root", 150.0)


def test_everyone_else_is_refused_with_one_line(hub: Hub, folder: str) -> None:
    before = [gpu["power_cap_w"] for gpu in hub.tick()["gpus"]]
    server = served_by(hub, folder, uid=5151, gid=5151)
    client = HubClient(server.socket_path, timeout_s=3)
    try:
        assert client.snapshot() is None
        assert client.last_error == (f"{server.socket_path}: the hub refused the connection: peer uid 5151 is"
                                     " neither the hub's owner (uid 0) nor allowed (--allow-uid/--allow-group)")
        reply = client.control({"type": "power", "action": "set", "gpus": [1], "watts": 150})
        assert reply["ok"] is False and "refused" in reply["message"]
        assert wait_until(lambda: "peer uid 5151 is neither" in server.closed_reasons[-1])
    finally:
        client.close()
        server.stop()
    assert [gpu["power_cap_w"] for gpu in hub.tick()["gpus"]] == before


def test_the_agent_hello_carries_the_peer_uid(hub: Hub, folder: str) -> None:
    seen: list[dict[str, Any]] = []
    original = hub.agent_hello

    def spy(info: dict[str, Any]) -> Any:
        seen.append(dict(info))
        return original(info)

    hub.agent_hello = spy  # type: ignore[method-assign]
    server = served_by(hub, folder, uid=4242, gid=STAFF)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(server.socket_path)
            sock.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "job": "uidjob", "pid": 7,
                                          "peer_uid": 0}))  # what the agent claims is overwritten
            assert wait_until(lambda: bool(seen))
    finally:
        server.stop()
    assert seen[0]["peer_uid"] == 4242


# -- real peers of other uids (root can fork children that drop to them) --------------------------------------


def ask_as(uid: int, gid: int, path: str) -> bytes:
    """A child that drops to uid/gid asks for a snapshot; what it received (b"EACCES" if it could not connect)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            received = b""
            try:
                sock.connect(path)
                sock.sendall(protocol.encode({"type": "hello", "role": "client"}) + protocol.encode({"type": "snapshot"}))
                while len(received) < 4 or len(received) < 4 + protocol.HEADER.unpack(received[:4])[0]:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        break
                    received += chunk
            except PermissionError:
                received = b"EACCES"
            except OSError as error:
                received = repr(error).encode()
            os.write(write_end, received[:4096])
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return data


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run clients as other users")
def test_real_users_through_a_root_hub(hub: Hub, folder: str) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    group_hub = HubServer(hub, os.path.join(folder, "run", "hub.sock"),
                          access=auth.UnixAccess(allowed_gids=frozenset({NOGROUP})))
    group_hub.start()
    try:
        assert b'"type":"snapshot"' in ask_as(nobody, NOGROUP, group_hub.socket_path)  # a member: served
        assert ask_as(4243, 4243, group_hub.socket_path) == b"EACCES"  # not a member: the file mode stops it
    finally:
        group_hub.stop()
    uid_hub = HubServer(hub, os.path.join(folder, "uid.sock"), access=auth.UnixAccess(allowed_uids=frozenset({nobody})))
    uid_hub.start()
    try:
        assert b'"type":"snapshot"' in ask_as(nobody, NOGROUP, uid_hub.socket_path)
        refused = ask_as(4243, 4243, uid_hub.socket_path)  # the socket is 0666: SO_PEERCRED stops it
        assert b'"type":"snapshot"' not in refused and b"peer uid 4243 is neither" in refused
    finally:
        uid_hub.stop()


# -- the flags -------------------------------------------------------------------------------------------------


def parsed(*argv: str) -> argparse.Namespace:
    parser = OneLineParser(prog="gpumix hub")
    parser.add_argument("--socket")
    add_access_flags(parser)
    return parser.parse_args(list(argv))


def test_access_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert access_settings("gpumix", parsed()) is None
    access = access_settings("gpumix", parsed("--socket", "/run/gpumix/hub.sock", "--allow-group", "nogroup",
                                              "--allow-uid", "nobody", "--allow-uid", "4242"))
    assert access == auth.UnixAccess(allowed_uids=frozenset({pwd.getpwnam("nobody").pw_uid, 4242}),
                                     allowed_gids=frozenset({NOGROUP}))
    for argv, message in ((["--allow-group", "nogroup"], "need --socket PATH"),
                          (["--socket", "/x.sock", "--allow-group", "no-such-group"], "no group named 'no-such-group'"),
                          (["--socket", "/x.sock", "--allow-uid", "no-such-user"], "no user named 'no-such-user'")):
        with pytest.raises(SystemExit):
            access_settings("gpumix", parsed(*argv))
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_the_privilege_hint_names_a_workflow_that_works() -> None:
    assert "--allow-group" in PRIVILEGE_HINT and "--socket" in PRIVILEGE_HINT and "--hub" in PRIVILEGE_HINT
