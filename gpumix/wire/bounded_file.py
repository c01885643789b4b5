"""Reading a small text file a user names (a rig, a power config, a theme) without trusting it.

Regular files only: a FIFO is never waited on (it is opened non-blocking and refused before any
read), a directory or a device is refused; at most `max_bytes` are read; the text must be UTF-8.
Whatever is wrong comes back as one line naming the file, never a traceback.

Standard library only (gpumix.wire).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class BoundedFileError(ValueError):
    """A file that cannot be what it is read as; str() is one line naming the file."""


def read_bounded_text(path: str | Path, max_bytes: int, what: str = "text file") -> str:
    """The UTF-8 text of the regular file `path`, at most `max_bytes` long; `what` names what the file
    should be in the error ("rig file", "power config")."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once (fstat below refuses it)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise BoundedFileError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise BoundedFileError(f"{path}: not a regular file ({kind}): cannot be a {what}")
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(max_bytes + 1)
        except OSError as error:
            raise BoundedFileError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise BoundedFileError(f"{path}: not a {what}: larger than {_size(max_bytes)}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise BoundedFileError(f"{path}:{line}: not UTF-8 text (byte {error.start})") from None


def _size(size_bytes: int) -> str:
    return f"{size_bytes // 1024} KiB" if size_bytes >= 1024 else f"{size_bytes} bytes"
