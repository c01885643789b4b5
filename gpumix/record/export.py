"""`gpumix export FILE --csv DIR | --parquet DIR`: a recording's tables as files for pandas, DuckDB, ...

Writes gpu_samples, rank_metrics and events (one file each). GPU rows carry the
GPU's UUID and tier next to its index; events carry their payload as JSON text.
"""

from __future__ import annotations

import csv
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpumix.record.schema import GPU_FIELDS, RANK_FIELDS, RecordingError, connect

QUERIES = {
    "gpu_samples": (
        "SELECT s.t, s.gpu, g.uuid, g.tier, s.res, " + ", ".join(f"s.{name}" for name in GPU_FIELDS)
        + " FROM gpu_samples s LEFT JOIN gpus g ON g.gpu = s.gpu ORDER BY s.t, s.gpu"
    ),
    "rank_metrics": "SELECT t, job, rank, gpu_uuid, res, " + ", ".join(RANK_FIELDS) + " FROM rank_metrics ORDER BY t, job, rank",
    "events": "SELECT t, kind, payload FROM events ORDER BY t",
}


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _rows(conn: sqlite3.Connection, table: str) -> tuple[list[str], Any]:
    cursor = conn.execute(QUERIES[table])
    return [column[0] for column in cursor.description], cursor


def _export(recording: str | Path, out_dir: str | Path, write_table: Callable[[Path, list[str], Any], int]) -> dict[str, int]:
    """Open the recording read-only and hand each table to write_table(base path, columns, rows)."""
    conn = connect(recording, readonly=True)  # checks it is a recording: nothing is written otherwise
    try:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        return {table: write_table(out / table, *_rows(conn, table)) for table in QUERIES}
    except sqlite3.Error as error:  # damaged past the schema check
        raise RecordingError(f"{recording}: cannot be read to the end ({error})") from None
    finally:
        conn.close()


def export_csv(recording: str | Path, out_dir: str | Path) -> dict[str, int]:
    """Write <table>.csv for each table; returns rows written per table."""

    def write(base: Path, columns: list[str], cursor: Any) -> int:
        count = 0
        with open(base.with_suffix(".csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(columns)
            for row in cursor:
                writer.writerow(["" if value is None else value for value in row])
                count += 1
        return count

    return _export(recording, out_dir, write)


def export_parquet(recording: str | Path, out_dir: str | Path) -> dict[str, int]:
    """Write <table>.parquet for each table (needs pyarrow: pip install 'gpumix-top[parquet]')."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(base: Path, columns: list[str], cursor: Any) -> int:
        rows = cursor.fetchall()
        data = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
        types = {name: (pa.string() if name in ("uuid", "tier", "job", "gpu_uuid", "kind", "payload") else
                        pa.int64() if name in ("gpu", "rank") else pa.float64()) for name in columns}
        try:
            arrow = pa.table({name: pa.array(values, type=types[name]) for name, values in data.items()})
        except (pa.ArrowException, TypeError, ValueError, OverflowError):  # SQLite keeps any type in any column
            raise RecordingError(f"{recording}: table {base.name} holds values of the wrong type"
                                 " (a damaged recording; --csv writes them as they are)") from None
        pq.write_table(arrow, base.with_suffix(".parquet"))
        return len(rows)

    return _export(recording, out_dir, write)
