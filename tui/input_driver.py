"""A terminal driver whose input thread sleeps until there is input (issue 13: the idle CPU).

Textual's LinuxDriver reads keys on a thread that wakes ten times a second (`select` with a 0.1 s
timeout) to see whether it should stop and to time out a lone Escape: an eighth of the idle
one-GPU dashboard's CPU, with nothing typed. This one waits on the terminal and on a pipe of its
own with no timeout, except while the key parser waits to tell a lone Escape from the start of a
sequence (then until that moment, as the parser asks); stopping the input (quit, suspend) writes
to the pipe. What is read and how it is parsed stay Textual's.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class _WakingEvent(threading.Event):
    """The driver's exit event: setting it also wakes the input thread's wait."""

    def __init__(self, wake: Any) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake()


class QuietInputDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = _WakingEvent(self._wake_input)
        self._wake_write_fd: int | None = None
        self._wake_lock = threading.Lock()  # the fd is never written after the thread closed it (a reused number)
        self.input_wakeups = 0  # how often the input thread's wait returned (tests count them)

    def _wake_input(self) -> None:
        with self._wake_lock:
            if self._wake_write_fd is not None:
                try:
                    os.write(self._wake_write_fd, b"\0")
                except OSError:  # the pipe is full: the thread wakes anyway
                    pass

    def run_input_thread(self) -> None:
        """LinuxDriver.run_input_thread, waiting with no timeout unless the parser has one."""
        try:
            wake_read_fd, write_fd = os.pipe()
        except OSError:  # no file descriptor to spare: Textual's own loop, waking ten times a second
            super().run_input_thread()
            return
        with self._wake_lock:
            self._wake_write_fd = write_fd
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(wake_read_fd, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            if self.exit_event.is_set():  # stopped before this thread had its pipe
                return
            while not self.exit_event.is_set():
                ready = selector.select(self._timeout_s(parser))
                self.input_wakeups += 1
                for key, _ in ready:
                    if key.fd == wake_read_fd:
                        os.read(wake_read_fd, 64)
                        continue
                    data = decode(os.read(self.fileno, 1024 * 4))
                    if not data:
                        break  # stdin piped and ended, as Textual's loop
                    for event in parser.feed(data):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            with self._wake_lock:
                self._wake_write_fd = None
                os.close(write_fd)
            selector.close()
            os.close(wake_read_fd)
            try:
                for _ in parser.feed(""):
                    pass
            except Exception:  # noqa: BLE001 - EOFError or ParseError at the end, as Textual ignores them
                pass

    @staticmethod
    def _timeout_s(parser: XTermParser) -> float | None:
        """None (wait for input) unless the parser waits for the rest of a sequence until a time."""
        due = parser._timeout_time
        return None if due is None else max(0.0, due - get_time())
