"""`gpumix export FILE --csv DIR | --parquet DIR`: a recording's tables as files for pandas, DuckDB, ...

Writes gpu_samples, rank_metrics and events (one file each). GPU rows carry the
GPU's UUID and tier next to its index; events carry their payload as JSON text.
"""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path
from typing import Any

from gpumix.recorder import GPU_FIELDS, RANK_FIELDS, connect

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


def export_csv(recording: str | Path, out_dir: str | Path) -> dict[str, int]:
    """Write <table>.csv for each table; returns rows written per table."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    conn = connect(recording, readonly=True)
    counts = {}
    try:
        for table in QUERIES:
            columns, cursor = _rows(conn, table)
            count = 0
            with open(out / f"{table}.csv", "w", newline="") as file:
                writer = csv.writer(file)
                writer.writerow(columns)
                for row in cursor:
                    writer.writerow(["" if value is None else value for value in row])
                    count += 1
            counts[table] = count
    finally:
        conn.close()
    return counts


def export_parquet(recording: str | Path, out_dir: str | Path) -> dict[str, int]:
    """Write <table>.parquet for each table (needs pyarrow: pip install 'gpumix-top[parquet]')."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    conn = connect(recording, readonly=True)
    counts = {}
    try:
        for table in QUERIES:
            columns, cursor = _rows(conn, table)
            rows = cursor.fetchall()
            data = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
            types = {name: (pa.string() if name in ("uuid", "tier", "job", "gpu_uuid", "kind", "payload") else
                            pa.int64() if name in ("gpu", "rank") else pa.float64()) for name in columns}
            arrow = pa.table({name: pa.array(values, type=types[name]) for name, values in data.items()})
            pq.write_table(arrow, out / f"{table}.parquet")
            counts[table] = len(rows)
    finally:
        conn.close()
    return counts
