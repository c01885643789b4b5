"""The hub's log lines go to stderr from a thread of their own: a stderr that nobody reads (a pipe left
full by whoever started the hub) then costs log lines, never the hub. Logging from the server's event
loop writes synchronously otherwise, and a full pipe once froze a soak-tested hub for good."""

from __future__ import annotations

import logging
import queue
import sys
import threading

LOG_QUEUE_RECORDS = 1000  # lines waiting for stderr; past this they are dropped and counted


class BackgroundStderr(logging.Handler):
    """A handler that never waits: records queue (bounded, dropped and counted when full) for a
    daemon thread that writes them; stop() waits a moment for it, never for a stuck stderr."""

    def __init__(self, records: int = LOG_QUEUE_RECORDS) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(message)s"))
        self._lines: queue.Queue[str | None] = queue.Queue(records)
        self.dropped = 0
        self._thread = threading.Thread(target=self._write, name="gpumix-log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.put_nowait(self.format(record))
        except queue.Full:
            self.dropped += 1

    def _write(self) -> None:
        while (line := self._lines.get()) is not None:
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # stderr closed: the lines are lost, the hub goes on

    def stop(self, timeout_s: float = 1.0) -> None:
        logging.getLogger().removeHandler(self)
        try:
            self._lines.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout_s)


def log_to_stderr_in_background() -> BackgroundStderr:
    """Warnings and above, as plain lines on stderr, written by a thread of their own; stop() at exit."""
    handler = BackgroundStderr()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    return handler
