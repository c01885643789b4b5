"""A client of a hub whose listen backlog is full waits for room, as a blocking connect would, instead of
failing at once with EAGAIN (a socket with a timeout is non-blocking underneath; Linux answers a full
Unix backlog that way). CI saw `no hub answered ... (Resource temporarily unavailable)` right after 200
agents had connected to a hub."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumix.wire.auth import open_socket
from gpumix.wire.paths import hub_answers


@pytest.fixture
def full_listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A listening Unix socket nobody accepts on, its backlog filled: connections until it refuses one more."""
    path = str(tmp_path / "hub.sock")
    pending: list[socket.socket] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        while True:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.setblocking(False)
            try:
                probe.connect(path)
            except BlockingIOError:
                probe.close()
                break
            pending.append(probe)
        try:
            yield listener, path
        finally:
            for sock in pending:
                sock.close()


def test_a_full_backlog_is_waited_out_not_taken_for_an_absent_hub(full_listener: tuple[socket.socket, str]) -> None:
    listener, path = full_listener
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
        for sock in accepted:
            sock.close()


def test_a_backlog_that_stays_full_still_fails_within_its_timeout(full_listener: tuple[socket.socket, str]) -> None:
    _, path = full_listener
    with pytest.raises(BlockingIOError):
        open_socket(path, timeout_s=0.2)


def test_a_hub_whose_backlog_is_full_still_answers(full_listener: tuple[socket.socket, str]) -> None:
    """The one-shots' probe (`hub_answers`) too: a busy hub is not taken for none (it then read NVML itself)."""
    listener, path = full_listener
    timer = threading.Timer(0.2, lambda: listener.accept()[0].close())
    timer.start()
    try:
        assert hub_answers(path, timeout_s=5.0)
    finally:
        timer.join(10)
    assert not hub_answers(path + ".none", timeout_s=0.2)
