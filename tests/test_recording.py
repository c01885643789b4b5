"""Recording: real SQLite files, the size bound, a SIGKILLed recorder, export."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from gpumix.hub import Hub
from gpumix.record.recorder import COMMIT_INTERVAL_S, Recorder, RecordingError, parse_size
from gpumix.record.schema import GPU_FIELDS, open_for_writing
from gpumix.record.thinning import retention_bands, thin
from tests.conftest import ManualClock, ticked_hub
from tests.recording_helpers import add_ranks, step_ranks
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


def recorded_hub(demo_hardware, clock: ManualClock, path: Path, ticks: int, step_s: float = 1.0,
                 **recorder_args) -> tuple[Hub, Recorder]:
    hub = ticked_hub(demo_hardware, clock, ticks=1)
    keys = add_ranks(hub)
    recorder = Recorder(path, **recorder_args).attach(hub)
    for tick in range(ticks):
        step_ranks(hub, keys, tick)
        hub.tick()
        clock.advance(step_s)
    return hub, recorder


def unpack(conn: sqlite3.Connection, zdict_id: int, blob: bytes) -> dict:
    zdict = conn.execute("SELECT data FROM zdicts WHERE id = ?", (zdict_id,)).fetchone()[0]
    decompressor = zlib.decompressobj(zdict=zdict)
    return json.loads(decompressor.decompress(blob) + decompressor.flush())


def test_round_trip(demo_hardware, clock: ManualClock, tmp_path: Path) -> None:
    path = tmp_path / "rec.sqlite"
    hub, recorder = recorded_hub(demo_hardware, clock, path, ticks=30)
    reply = hub.control({"type": "power", "action": "set", "gpus": [0], "watts": 120})
    assert reply["ok"], reply
    recorder.event("restart", {"job": "train", "why": "test"})
    assert recorder.flush()
    last = hub.snapshot()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # 31 snapshots: 30 ticks, and the tick that shows the new cap at once (no new step: no rank rows)
    assert conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] == 31
    assert conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0] == 310
    assert conn.execute("SELECT COUNT(*) FROM rank_metrics").fetchone()[0] == 300
    row = conn.execute(f"SELECT {', '.join(GPU_FIELDS)} FROM gpu_samples WHERE gpu = 3 ORDER BY t DESC LIMIT 1").fetchone()
    gpu3 = last["gpus"][3]
    for name, value in zip(GPU_FIELDS, row, strict=True):
        expected = gpu3[name]
        assert value == (float(expected) if expected is not None else None), name
    rank0 = conn.execute("SELECT step, step_time_s, comm_share, straggler FROM rank_metrics WHERE rank = 0"
                         " ORDER BY t DESC LIMIT 1").fetchone()
    assert rank0 == (29.0, 0.5, pytest.approx(0.2), 1.0)
    zdict_id, blob = conn.execute("SELECT zdict, data FROM snapshots ORDER BY t DESC LIMIT 1").fetchone()
    assert unpack(conn, zdict_id, blob) == json.loads(json.dumps(last))
    kinds = [kind for kind, in conn.execute("SELECT kind FROM events ORDER BY t")]
    assert "power_cap" in kinds and "restart" in kinds
    cap = json.loads(conn.execute("SELECT payload FROM events WHERE kind = 'power_cap'").fetchone()[0])
    assert (cap["gpu_index"], cap["new_w"], cap["old_w"]) == (0, 120.0, 170.0)
    recorder.close()
    assert not Path(f"{path}-wal").exists() or os.path.getsize(f"{path}-wal") == 0


def test_findings_appearing_and_clearing_are_events(demo_hardware, clock: ManualClock, tmp_path: Path) -> None:
    path = tmp_path / "rec.sqlite"
    hub = ticked_hub(demo_hardware, clock, ticks=1)
    recorder = Recorder(path).attach(hub)
    hub.tick()
    keys = add_ranks(hub)
    for step in range(12):
        step_ranks(hub, keys, step)
    hub.tick()  # ranks arrive: a straggler finding appears
    for key in keys:
        hub.forget_rank(key)
    hub.tick()  # ... and clears
    assert recorder.flush()
    events = sqlite3.connect(path).execute("SELECT kind, payload FROM events ORDER BY t, rowid").fetchall()
    appeared = {json.loads(p)["id"] for k, p in events if k == "finding_appeared"}
    cleared = {json.loads(p)["id"] for k, p in events if k == "finding_cleared"}
    assert appeared & cleared, events
    recorder.close()


def test_size_bound_downsamples_and_stays_under_budget(demo_hardware, clock: ManualClock, tmp_path: Path) -> None:
    path = tmp_path / "small.sqlite"
    budget = 600 * 1024
    hub, recorder = recorded_hub(demo_hardware, clock, path, ticks=500, step_s=2.0, max_bytes=budget)
    assert recorder.flush()
    assert recorder.compactions >= 1
    assert recorder.size_bytes() <= budget
    conn = sqlite3.connect(path)
    newest = conn.execute("SELECT MAX(t) FROM snapshots").fetchone()[0]
    assert newest == pytest.approx(hub.snapshot()["timestamp_s"])  # the newest data is always kept
    assert conn.execute("SELECT MAX(res) FROM gpu_samples").fetchone()[0] > 1  # older rows were thinned
    assert conn.execute("SELECT COUNT(*) FROM gpu_samples WHERE res = 1").fetchone()[0] > 0
    recorder.close()
    on_disk = sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())
    assert on_disk <= budget
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_thinning_keeps_one_row_per_bucket(tmp_path: Path) -> None:
    conn = open_for_writing(tmp_path / "d.sqlite", 64 * 1024**2)
    now = 100_000.0
    rows = [(now - age, gpu) for age in range(7200) for gpu in range(2)]
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO gpu_samples (t, gpu) VALUES (?, ?)", rows)
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    thin(conn, 0.0, now - 3600, 10.0)
    conn.execute("COMMIT")
    for gpu in range(2):
        recent = conn.execute("SELECT COUNT(*) FROM gpu_samples WHERE gpu = ? AND t >= ?", (gpu, now - 3600)).fetchone()[0]
        older = conn.execute("SELECT COUNT(*), MIN(res), MAX(res) FROM gpu_samples WHERE gpu = ? AND t < ?",
                             (gpu, now - 3600)).fetchone()
        assert recent == 3601
        assert older[0] == pytest.approx(360, abs=1) and older[1:] == (10, 10)


def test_retention_bands_double_in_length_and_resolution() -> None:
    # the newest 300 s whole; then 300 s at 1 s, 600 s at 2 s, 1200 s at 4 s, ... back to the oldest
    bands = retention_bands(now_s=10_000.0, oldest_s=0.0, whole_s=300.0, base_s=1.0)
    assert bands[0] == (9400.0, 9700.0, 1.0) and bands[1] == (8800.0, 9400.0, 2.0)
    assert [(end - start, res) for start, end, res in bands[:4]] == [(300, 1), (600, 2), (1200, 4), (2400, 8)]
    assert bands[0][1] == 9700.0 and bands[-1][0] == 0.0
    assert all(later[1] == earlier[0] for earlier, later in zip(bands, bands[1:], strict=False))
    # rows per band: length / res, the same for each full band
    assert {(end - start) / res for start, end, res in bands[:-1]} == {300.0}


def test_a_slow_writer_drops_the_oldest_and_counts(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "q.sqlite", queue_size=4)
    original = recorder._write

    def slow(entry):
        time.sleep(0.05)
        original(entry)

    recorder._write = slow
    for i in range(40):
        recorder.event("tick", {"i": i}, t=float(i))
    assert recorder.flush()
    recorder.close()
    kept = [json.loads(p)["i"] for p, in sqlite3.connect(tmp_path / "q.sqlite").execute("SELECT payload FROM events ORDER BY t")]
    assert recorder.drops > 0 and recorder.drops + len(kept) == 40
    assert kept[-1] == 39  # the newest survive


def snapshots_in(path: Path) -> int:
    """Snapshots committed to a recording another process writes (0 before its table exists)."""
    reader = sqlite3.connect(path, timeout=1)
    try:
        return reader.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        reader.close()


def committed(path: Path, t: float) -> bool:
    """The snapshot of the tick at `t` is committed to a recording another process writes."""
    reader = sqlite3.connect(path, timeout=1)
    try:
        return reader.execute("SELECT COUNT(*) FROM snapshots WHERE t = ?", (t,)).fetchone()[0] == 1
    except sqlite3.Error:  # its tables are not there yet
        return False
    finally:
        reader.close()


def test_sigkilled_recorder_loses_at_most_a_second(tmp_path: Path) -> None:
    # A killed hub loses at most its last commit interval (docs/recording.md: its last second).
    assert COMMIT_INTERVAL_S <= 1.0
    path = tmp_path / "crash.sqlite"
    child = subprocess.Popen([sys.executable, str(ROOT / "tests" / "record_commit_helper.py"), str(path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    ticks: list[float] = []
    try:
        assert child.stdout.readline().strip() == "ready"
        for _ in range(3):
            child.stdin.write("tick\n")
            child.stdin.flush()
            t = float(child.stdout.readline())
            # nobody flushes: the recorder commits the tick by itself, on its interval
            wait_until(lambda t=t: committed(path, t), 60, f"the tick at {t} committed")
            ticks.append(t)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(5)
    finally:
        if child.poll() is None:
            child.kill()
    from gpumix.record.replay import ReplaySource

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [t for (t,) in conn.execute("SELECT t FROM snapshots ORDER BY t")] == ticks
    assert conn.execute("SELECT COUNT(*) FROM gpu_samples WHERE t = ?", (ticks[-1],)).fetchone()[0] == 10
    conn.close()
    source = ReplaySource(path)  # and it replays
    assert len(source.times) == 3 and source.snapshot()["gpus"][0]["index"] == 0


def test_export_csv_and_parquet(demo_hardware, clock: ManualClock, tmp_path: Path, capsys) -> None:
    from gpumix.cli.main import main

    path = tmp_path / "rec.sqlite"
    hub, recorder = recorded_hub(demo_hardware, clock, path, ticks=5)
    recorder.event("plan", {"split": [64] * 10})
    recorder.close()
    assert main(["export", str(path), "--csv", str(tmp_path / "csv")]) == 0
    # events: the plan in force the hub reports once the ranks run (their equal split), then ours
    assert "gpu_samples: 50 rows, rank_metrics: 50 rows, events: 2 rows" in capsys.readouterr().out
    with open(tmp_path / "csv" / "gpu_samples.csv") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 50 and rows[0]["uuid"] == hub.snapshot()["gpus"][0]["uuid"] and rows[0]["tier"] == "RTX 3060 12G"
    last9 = [r for r in rows if r["gpu"] == "9"][-1]
    assert float(last9["power_w"]) == pytest.approx(hub.snapshot()["gpus"][9]["power_w"])
    with open(tmp_path / "csv" / "rank_metrics.csv") as file:
        ranks = list(csv.DictReader(file))
    assert {r["rank"] for r in ranks} == {str(i) for i in range(10)} and ranks[0]["job"] == "train"
    with open(tmp_path / "csv" / "events.csv") as file:
        events = list(csv.DictReader(file))
    assert [e["kind"] for e in events] == ["plan", "plan"]
    in_force = json.loads(events[0]["payload"])["plan"]
    assert in_force["job"] == "train" and [r["samples"] for r in in_force["ranks"]] == [32] * 10
    assert json.loads(events[1]["payload"]) == {"split": [64] * 10}
    pyarrow_parquet = pytest.importorskip("pyarrow.parquet")
    assert main(["export", str(path), "--parquet", str(tmp_path / "pq")]) == 0
    table = pyarrow_parquet.read_table(tmp_path / "pq" / "gpu_samples.parquet")
    assert table.num_rows == 50 and table.column("util_gpu_pct").to_pylist() == [
        float(r["util_gpu_pct"]) if r["util_gpu_pct"] else None for r in rows]


def test_export_of_a_missing_file_is_one_line(tmp_path: Path, capsys) -> None:
    from gpumix.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path / "nope.sqlite"), "--csv", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no recording" in err


def test_parse_size_and_minimum_budget(tmp_path: Path) -> None:
    assert parse_size("512M") == 512 * 1024**2 and parse_size("2g") == 2 * 1024**3 and parse_size("300KiB") == 300 * 1024
    with pytest.raises(ValueError):
        parse_size("lots")
    with pytest.raises(RecordingError):
        Recorder(tmp_path / "x.sqlite", max_bytes=1000)


@pytest.mark.slow
def test_gpumix_hub_records_and_serves_metrics(tmp_path: Path) -> None:
    """The real CLI in its own process: --record and --prometheus on an ephemeral port."""
    import urllib.request

    path = tmp_path / "hub.sqlite"
    rig = ROOT / "gpumix" / "rigs" / "mixed10.toml"
    child = subprocess.Popen(
        [sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", str(rig), "--interval", "0.2",
         "--socket", str(tmp_path / "hub.sock"), "--record", str(path), "--prometheus", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = child.stderr.readline()
        assert "metrics on http://127.0.0.1:" in line, line
        url = line.split("metrics on ", 1)[1].strip()
        body = wait_until(lambda: (text := urllib.request.urlopen(url, timeout=5).read().decode())
                          .count("DCGM_FI_DEV_GPU_UTIL{") == 10 and text, 30, "the 10 GPUs on /metrics")
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 10
        wait_until(lambda: snapshots_in(path) >= 4, 30, "4 recorded ticks", poll_s=0.05)
        child.send_signal(signal.SIGTERM)
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] >= 4
    assert conn.execute("SELECT COUNT(DISTINCT gpu) FROM gpu_samples").fetchone()[0] == 10
