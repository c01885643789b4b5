"""A client of a hub whose listen backlog is full waits for room, as a blocking connect would, instead of
failing at once with EAGAIN (a socket with a timeout is non-blocking underneath; Linux answers a full
Unix backlog that way). CI saw `no hub answered ... (Resource temporarily unavailable)` right after 200
agents had connected to a hub."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from gpumix.wire.auth import open_socket


def fill_backlog(path: str) -> list[socket.socket]:
    """Connections nobody accepts, until the listener refuses one more (then its backlog is full)."""
    pending = []
    while True:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.setblocking(False)
        try:
            probe.connect(path)
        except BlockingIOError:
            probe.close()
            return pending
        pending.append(probe)


def test_a_full_backlog_is_waited_out_not_taken_for_an_absent_hub(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        pending = fill_backlog(path)
        room = threading.Event()
        accepted: list[socket.socket] = []

        def make_room() -> None:  # the hub gets to its backlog once the client is already waiting
            room.wait(10)
            accepted.append(listener.accept()[0])

        helper = threading.Thread(target=make_room)
        helper.start()
        timer = threading.Timer(0.2, room.set)
        timer.start()
        try:
            with open_socket(path, timeout_s=5.0) as client:
                assert client.getpeername() == path
            assert room.is_set()  # it connected after the room was made, not before
        finally:
            room.set()
            helper.join(10)
            timer.cancel()
            for sock in pending + accepted:
                sock.close()


def test_a_backlog_that_stays_full_still_fails_within_its_timeout(tmp_path: Path) -> None:
    path = str(tmp_path / "hub.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        pending = fill_backlog(path)
        try:
            with pytest.raises(BlockingIOError):
                open_socket(path, timeout_s=0.2)
        finally:
            for sock in pending:
                sock.close()
