"""Where a terminal monitor's bytes go: which screen rows it rewrites, and how much of it is style.

Runs a command in a pty (as benchmarks/bench_tui.py does), records what it writes after a warm-up,
and charges every byte to the screen row of the last cursor move (`ESC[row;colH`) before it. Writes
JSON: bytes per second in all, per row (most first), and the share of SGR (colour) sequences.

    python benchmarks/tui_bytes_by_row.py --seconds 15 --cols 160 --rows 48 --out rows.json -- gpumix-top --demo
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import spawn_in_pty  # noqa: E402

CURSOR_MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")
SGR = re.compile(rb"\x1b\[[0-9;]*m")


STARTUP_LIMIT_S = 60.0  # a command that writes nothing for this long is measured from then on


def record(command: list[str], seconds: float, warmup: float, cols: int, rows: int) -> bytes:
    """What the command writes over `seconds`, from `warmup` seconds after its first write: on a
    loaded box a dashboard may take longer than the warm-up to start, and its first full paint
    (some KB) is not the steady state being measured."""
    pid, master = spawn_in_pty(command, cols, rows)
    start = time.monotonic() + STARTUP_LIMIT_S  # moved to the first write
    captured = bytearray()
    while time.monotonic() < start + warmup + seconds:
        readable, _, _ = select.select([master], [], [], 0.05)
        if not readable:
            continue
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        start = min(start, time.monotonic())
        if time.monotonic() >= start + warmup:
            captured += data
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            readable, _, _ = select.select([master], [], [], 0.05)
            if readable:
                os.read(master, 65536)
        except OSError:
            break
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
    else:
        os.kill(pid, signal.SIGKILL)
    os.close(master)
    return bytes(captured)


def by_row(raw: bytes) -> dict[int, int]:
    """Bytes charged to the row of the last cursor move before them (0: before any move)."""
    rows: dict[int, int] = {}
    row, last = 0, 0
    for match in CURSOR_MOVE.finditer(raw):
        rows[row] = rows.get(row, 0) + match.start() - last
        row, last = int(match.group(1)), match.start()
    rows[row] = rows.get(row, 0) + len(raw) - last
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--cols", type=int, default=80)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--out", metavar="FILE.json")
    parser.add_argument("--raw", metavar="FILE", help="also keep the recorded bytes")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    raw = record(command, args.seconds, args.warmup, args.cols, args.rows)
    if args.raw:
        Path(args.raw).write_bytes(raw)
    rows = by_row(raw)
    result: dict[str, Any] = {
        "command": command, "terminal": f"{args.cols}x{args.rows}", "seconds": args.seconds,
        "warmup_s": args.warmup, "warmup_from": "the command's first write",
        "bytes_per_s": round(len(raw) / args.seconds, 1),
        "sgr_share": round(sum(len(m.group(0)) for m in SGR.finditer(raw)) / max(1, len(raw)), 3),
        "cursor_moves_per_s": round(len(CURSOR_MOVE.findall(raw)) / args.seconds, 1),
        "bytes_per_s_by_row": {str(row): round(count / args.seconds, 1)
                               for row, count in sorted(rows.items(), key=lambda item: -item[1])},
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({key: value for key, value in result.items() if key != "bytes_per_s_by_row"}))
    print("by row (B/s):", list(result["bytes_per_s_by_row"].items())[:20])
    return 0


if __name__ == "__main__":
    sys.exit(main())
