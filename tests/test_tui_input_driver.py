"""The dashboard's input thread sleeps until a key comes (gpumix.tui.input_driver, issue 13: Textual's
woke ten times a second), and keys, a lone Escape included, still arrive. On a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# gpumix-top on the one-GPU simulated rig, its input thread's waits counted: reset once the
# dashboard runs, written to the file after a further while, with nothing typed.
COUNTING_TOP = """
import selectors, sys, threading, time
from pathlib import Path

import pytest
out = Path(sys.argv[1])
waits = {"n": 0}
original = selectors.SelectSelector.select
def select(self, timeout=None):
    if threading.current_thread().name == "textual-input":
        waits["n"] += 1
    return original(self, timeout)
selectors.SelectSelector.select = select
def count():
    time.sleep(2.0)
    waits["n"] = 0
    time.sleep(2.0)
    out.write_text(str(waits["n"]))
threading.Thread(target=count, daemon=True).start()
from gpumix.tui.main import main
sys.exit(main(["--interval", "1", "--sim", sys.argv[2]]))
"""

# A small app on the driver: each key it gets, written down; q quits.
KEYS_APP = """
import sys
from pathlib import Path

import pytest
from textual.app import App
from gpumix.tui.input_driver import QuietInputDriver
out = Path(sys.argv[1])

class Keys(App):
    def on_mount(self):
        out.write_text("ready\\n")
    def on_key(self, event):
        with out.open("a") as f:
            f.write(event.key + "\\n")
        if event.key == "q":
            self.exit()

Keys(driver_class=QuietInputDriver).run()
"""


class Terminal:
    """`python -c code args` on a real pseudo-terminal of 80x24, its output drained."""

    def __init__(self, code: str, *args: str) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(REPO)}
        env.pop("GPUMIX_HUB", None)
        self.process = subprocess.Popen([sys.executable, "-c", code, *args], stdin=slave, stdout=slave, stderr=slave,
                                        env=env, start_new_session=True, close_fds=True, cwd=REPO)
        os.close(slave)
        self.master = master
        self.output = bytearray()

    def drain_until(self, done: Callable[[], bool], deadline_s: float = 60.0) -> None:
        end = time.monotonic() + deadline_s
        while not done():
            assert time.monotonic() < end, self.output[-2000:].decode(errors="replace")
            assert self.process.poll() is None or done(), self.output[-2000:].decode(errors="replace")
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:
                    return

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> int:
        self.drain_until(lambda: self.process.poll() is not None, 30.0)
        os.close(self.master)
        return self.process.wait()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_the_dashboards_input_thread_waits_for_a_key(tmp_path: Path) -> None:
    out = tmp_path / "waits"
    terminal = Terminal(COUNTING_TOP, str(out), str(REPO / "benchmarks" / "rig_1gpu.toml"))
    try:
        terminal.drain_until(out.exists)
        terminal.type(b"q")
        assert terminal.close() == 0
    finally:
        terminal.kill()
    # Textual's driver: about 20 in these 2 s (a wait of 0.1 s at a time); this one: none while nothing is typed
    assert int(out.read_text()) <= 2


def test_keys_and_a_lone_escape_arrive(tmp_path: Path) -> None:
    out = tmp_path / "keys"
    terminal = Terminal(KEYS_APP, str(out))
    try:
        terminal.drain_until(lambda: out.exists() and "ready" in out.read_text())
        terminal.type(b"a")
        terminal.drain_until(lambda: "a\n" in out.read_text())
        terminal.type(b"\x1b")  # alone: told from a sequence's start only when the parser's wait runs out
        terminal.drain_until(lambda: "escape\n" in out.read_text())
        terminal.type(b"\x1b[A")  # a sequence: one key, not an Escape and three more
        terminal.drain_until(lambda: "up\n" in out.read_text())
        terminal.type(b"q")
        assert terminal.close() == 0
    finally:
        terminal.kill()
    assert out.read_text().split("\n") == ["ready", "a", "escape", "up", "q", ""]


async def test_without_a_spare_file_descriptor_the_input_thread_is_textuals(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.pipe() failing (EMFILE) must not end the app: the thread runs Textual's own loop instead."""
    from textual.app import App
    from textual.drivers.linux_driver import LinuxDriver

    from gpumix.tui import input_driver

    driver = input_driver.QuietInputDriver(App())
    ran: list[str] = []
    monkeypatch.setattr(LinuxDriver, "run_input_thread", lambda self: ran.append("textual"))

    def no_pipe() -> tuple[int, int]:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(input_driver.os, "pipe", no_pipe)
    driver.run_input_thread()
    assert ran == ["textual"] and driver._wake_write_fd is None
    driver.exit_event.set()  # waking a thread that has no pipe writes nothing, raises nothing
