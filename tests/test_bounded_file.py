"""The one reader of small user-named files (rigs, power configs): a FIFO, a directory, an oversized
file or bad UTF-8 each give one line naming the file, never a hang or a traceback."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpumix.power.supplies import LayoutError, load_layout
from gpumix.sim.rig import RigError, load_rig
from gpumix.wire.bounded_file import BoundedFileError, read_bounded_text


def one_line(error: pytest.ExceptionInfo[BaseException], path: Path) -> str:
    message = str(error.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def read_in_thread(target: object, *args: object) -> BaseException | None:
    """Run a reader on a thread: a reader that blocks on a FIFO would hang the test run, so it is
    told apart (None) from one that returned or raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            target(*args)  # type: ignore[operator]
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 (handed back to the test)
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10.0)  # a deadline for a hang, not a timing figure
    assert not thread.is_alive(), "the reader blocked on the FIFO"
    return outcome[0]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "rig.toml"
    os.mkfifo(fifo)
    error = read_in_thread(read_bounded_text, fifo, 1024, "rig file")
    assert isinstance(error, BoundedFileError)
    assert str(error) == f"{fifo}: not a regular file (a FIFO): cannot be a rig file"
    assert isinstance(read_in_thread(load_rig, fifo), RigError)
    assert isinstance(read_in_thread(load_layout, fifo), LayoutError)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "rig.toml"
    folder.mkdir()
    with pytest.raises(BoundedFileError) as error:
        read_bounded_text(folder, 1024, "rig file")
    assert one_line(error, folder) == f"{folder}: not a regular file (a directory): cannot be a rig file"
    with pytest.raises(RigError) as rig_error:
        load_rig(folder)
    assert one_line(rig_error, folder).endswith("(a directory): cannot be a rig file")
    with pytest.raises(LayoutError) as layout_error:
        load_layout(folder)
    assert one_line(layout_error, folder) == f"{folder}: not a regular file (a directory): cannot be a power config"


def test_an_oversized_file_is_refused_and_one_at_the_limit_is_read(tmp_path: Path) -> None:
    at_limit, over = tmp_path / "ok.toml", tmp_path / "big.toml"
    at_limit.write_text("x" * 2048)
    over.write_text("x" * 2049)
    assert read_bounded_text(at_limit, 2048) == "x" * 2048
    with pytest.raises(BoundedFileError) as error:
        read_bounded_text(over, 2048, "power config")
    assert one_line(error, over) == f"{over}: not a power config: larger than 2 KiB"
    huge = tmp_path / "huge.power.toml"
    huge.write_bytes(b"#" * (64 * 1024 + 1))
    with pytest.raises(LayoutError) as layout_error:
        load_layout(huge)
    assert one_line(layout_error, huge) == f"{huge}: not a power config: larger than 64 KiB"


def test_bad_utf8_names_the_line_and_byte(tmp_path: Path) -> None:
    binary = tmp_path / "bad.toml"
    binary.write_bytes(b"[gpu]\nname = '\xff'\n")
    with pytest.raises(BoundedFileError) as error:
        read_bounded_text(binary, 1024)
    assert one_line(error, binary) == f"{binary}:2: not UTF-8 text (byte 14)"
    with pytest.raises(LayoutError) as layout_error:
        load_layout(binary)
    assert one_line(layout_error, binary) == f"{binary}:2: not UTF-8 text (byte 14)"


def test_a_missing_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(BoundedFileError) as error:
        read_bounded_text(missing, 1024, "rig file")
    assert one_line(error, missing) == f"{missing}: cannot read rig file: No such file or directory"
