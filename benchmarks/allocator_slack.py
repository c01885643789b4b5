"""How much of a running gpumix-top's resident memory the allocators hold free (issue 13: RSS <= nvitop's + 10 MB).

Runs `gpumix-top ARGS` in a 160x48 pseudo-terminal through a wrapper in the same interpreter that, --after
seconds in, reads VmRSS/VmHWM/RssAnon, then after gc.collect(), then after glibc's malloc_trim(0), with
pymalloc's arena counts and free pools (sys._debugmallocstats) before and after: what a trim after
start-up would give back. VmHWM (the peak, the goal's figure) cannot go down either way.

    python benchmarks/allocator_slack.py --after 10 --out slack.json -- --sim benchmarks/rig_1gpu.toml --interval 1
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import re
import select
import sys
import threading
import time
from pathlib import Path
from typing import Any


def status_kb() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            fields[key] = int(value.split()[0])
    return fields


def pymalloc_stats() -> dict[str, int]:
    """The summary lines of sys._debugmallocstats (written to fd 2): arenas and pools."""
    read_end, write_end = os.pipe()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    stats = {}
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        match = re.match(r"^(# arenas [a-z ]+|# bytes in allocated blocks|# bytes in available blocks"
                         r"|\d+ unused pools \* \d+ bytes|# bytes lost to [a-z ]+|Total)\s*=\s*([\d,]+)", line)
        if match:
            stats[re.sub(r"^\d+ ", "", match.group(1)).strip()] = int(match.group(2).replace(",", ""))
    return stats


def dump(out: Path) -> None:
    result: dict[str, Any] = {"before": status_kb(), "pymalloc_before": pymalloc_stats()}
    gc.collect()
    result["after_gc_collect"] = status_kb()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        result["after_malloc_trim"] = status_kb()
    except (OSError, AttributeError) as error:
        result["after_malloc_trim"] = f"no glibc malloc_trim: {error}"
    result["pymalloc_after"] = pymalloc_stats()
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.rename(out)


def child(after_s: float, out: Path, argv: list[str]) -> int:
    timer = threading.Timer(after_s, dump, (out,))
    timer.daemon = True
    timer.start()
    from gpumix.tui.main import main

    return main(argv)


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_tui import spawn_in_pty, stop  # a sibling script, not a package

    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--after", str(args.after), "--out",
               str(args.out), "--", *argv]
    args.out.unlink(missing_ok=True)
    pid, master = spawn_in_pty(command, args.cols, args.rows)
    deadline = time.monotonic() + args.after + 60
    while time.monotonic() < deadline and not args.out.exists():  # drain the terminal meanwhile
        if select.select([master], [], [], 0.05)[0]:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break
    print(stop(pid, master, b"q", bytearray()))
    if args.out.exists():
        print(args.out.read_text())
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cols", type=int, default=160)
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.child:
        return child(args.after, args.out, argv)
    return parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())
