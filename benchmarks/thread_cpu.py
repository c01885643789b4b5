"""Each thread's CPU while a Python program runs, with no profiler slowing it (issue 13).

Runs a module or script in this interpreter (as benchmarks/profile_threads.py does), and between
--skip seconds and --skip + --seconds reads each thread's user + system time from
/proc/self/task/<native id>/stat (clock ticks, 10 ms each: a window of 30 s resolves 0.033 % of a
core). Threads are named by Python's threading (gpumix-poll, gpumix-hub-sampler, ...; Textual's
input and output threads are unnamed Thread-N / textual-*). Then it stops the program (SIGTERM) and
writes JSON:

    python benchmarks/bench_tui.py --seconds 40 --warmup 1 --cols 160 --rows 48 -- \\
        python benchmarks/thread_cpu.py --skip 6 --seconds 30 --out threads.json -- -m gpumix.tui.main --interval 1
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
import threading
import time
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) of each live thread, by 'name (native id)'."""
    ticks = {}
    for thread in threading.enumerate():
        if thread.native_id is None:
            continue
        try:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[f"{thread.name} ({thread.native_id})"] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def process_cpu_ticks() -> int:
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def measure(skip_s: float, seconds: float, out: Path) -> None:
    time.sleep(skip_s)
    start, start_all, t0 = thread_cpu_ticks(), process_cpu_ticks(), time.monotonic()
    time.sleep(seconds)
    end, end_all, wall_s = thread_cpu_ticks(), process_cpu_ticks(), time.monotonic() - t0
    threads = {name: round(100 * (ticks - start.get(name, 0)) / TICKS_PER_S / wall_s, 3) for name, ticks in end.items()}
    out.write_text(json.dumps({
        "wall_s": round(wall_s, 2),
        "resolution_pct": round(100 / TICKS_PER_S / wall_s, 3),
        "process_cpu_pct_of_one_core": round(100 * (end_all - start_all) / TICKS_PER_S / wall_s, 3),
        "threads_cpu_pct_of_one_core": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
    }, indent=1))
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip", type=float, default=5.0, help="seconds before the window (start-up)")
    parser.add_argument("--seconds", type=float, default=30.0, help="the window")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        parser.error("name what to run after --: -m MODULE ARGS or SCRIPT ARGS")
    module = target[1] if target[0] == "-m" and len(target) > 1 else None
    sys.argv = target[1:] if module else target
    threading.Thread(target=measure, args=(args.skip, args.seconds, args.out), name="thread-cpu-meter", daemon=True).start()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
