"""Recordings that are not ours, of another version or damaged, and files that cannot be recorded
to: one clear line and exit 2 from `gpumix export`, `gpumix-top --replay` and `gpumix hub --record`,
never a traceback (issue 10, item 11)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpumix.record.export import export_csv
from gpumix.record.recorder import Recorder, RecordingError
from gpumix.record.replay import ReplaySource
from tests.conftest import ManualClock
from tests.test_recording import recorded_hub

ROOT = Path(__file__).resolve().parent.parent


def meta_only(path: Path, version: str = "1") -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (version,))
    conn.commit()
    conn.close()
    return path


def bad_recordings(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what its one line says)."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"hello world" * 100)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    odd_name = tmp_path / "odd?name#.db"  # a URI's query and fragment characters in a plain name
    meta_only(odd_name)
    return {
        "meta only": (meta_only(tmp_path / "meta.db"), "is not a gpumix recording (no table gpus)"),
        "schema 99": (meta_only(tmp_path / "v99.db", "99"), "a recording of schema version '99'; this gpumix reads version 1"),
        "not sqlite": (garbage, "is not a gpumix recording (file is not a database)"),
        "empty": (empty, "is not a gpumix recording (no table meta)"),
        "a directory": (tmp_path, "is not a gpumix recording (not a file)"),
        "odd name": (odd_name, "odd?name#.db is not a gpumix recording (no table gpus)"),
    }


@pytest.mark.parametrize("case", ["meta only", "schema 99", "not sqlite", "empty", "a directory", "odd name"])
def test_export_and_replay_of_a_bad_recording_raise_one_line(tmp_path: Path, case: str) -> None:
    path, says = bad_recordings(tmp_path)[case]
    for open_it in (lambda: export_csv(path, tmp_path / "out"), lambda: ReplaySource(path)):
        with pytest.raises(RecordingError) as refused:
            open_it()
        assert says in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()  # nothing written for a file that is not a recording


@pytest.mark.parametrize("case", ["meta only", "schema 99"])
def test_the_commands_say_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path, says = bad_recordings(tmp_path)[case]
    for command in ([sys.executable, "-m", "gpumix.cli.main", "export", str(path), "--csv", str(tmp_path / "out")],
                    [sys.executable, "-c", "import sys; from gpumix.tui.main import main; sys.exit(main(sys.argv[1:]))",
                     "--replay", str(path)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
        lines = [line for line in done.stderr.splitlines() if "accelerator" not in line]  # deepspeed's import note
        assert done.returncode == 2, done.stderr
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_a_damaged_snapshot_replays_as_the_last_good_one(demo_hardware, clock: ManualClock, tmp_path: Path) -> None:
    path = tmp_path / "rec.sqlite"
    _, recorder = recorded_hub(demo_hardware, clock, path, ticks=5)
    recorder.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE snapshots SET data = x'deadbeef' WHERE rowid = (SELECT MAX(rowid) FROM snapshots)")
    conn.execute("INSERT INTO events VALUES (1e300, 'note', '{not json')")
    conn.commit()
    conn.close()
    source = ReplaySource(path)
    good = source.snapshot_at(len(source.times) - 2)
    assert source.snapshot_at(len(source.times) - 1) is good
    assert source.events(until_s=1e301)[-1]["payload"] == {"text": "{not json"}
    source.close()


def test_recording_where_no_file_can_be_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match=r"^cannot record to /dev/null/x.db: Not a directory$"):
        Recorder("/dev/null/x.db")
    with pytest.raises(RecordingError, match=r"a recording of schema version '99'"):
        Recorder(meta_only(tmp_path / "v99.db", "99"))  # and the file is left as it was
    assert [name for name, in sqlite3.connect(tmp_path / "v99.db").execute("SELECT name FROM sqlite_master"
                                                                           " WHERE type = 'table'")] == ["meta"]
    done = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "hub", "--demo", "--socket", str(tmp_path / "h.sock"),
                           "--record", "/dev/null/x.db"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    lines = [line for line in done.stderr.splitlines() if "accelerator" not in line]
    assert done.returncode == 2 and lines == ["gpumix: cannot record to /dev/null/x.db: Not a directory"], done.stderr


def test_parquet_export_of_a_value_of_the_wrong_type_is_one_line(demo_hardware, clock: ManualClock,
                                                                   tmp_path: Path) -> None:
    from gpumix.record.export import export_parquet

    path = tmp_path / "rec.sqlite"
    _, recorder = recorded_hub(demo_hardware, clock, path, ticks=3)
    recorder.close()
    conn = sqlite3.connect(path)  # SQLite keeps any type in any column: a damaged or hand-made file
    conn.execute("UPDATE gpu_samples SET power_w = 'lots' WHERE rowid = (SELECT MIN(rowid) FROM gpu_samples)")
    conn.commit()
    conn.close()
    with pytest.raises(RecordingError, match=r"table gpu_samples holds values of the wrong type"):
        export_parquet(path, tmp_path / "pq")
