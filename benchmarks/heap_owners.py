"""Who owns a running gpumix-top's Python heap: its loaded modules and its traced allocations.

Runs `gpumix-top ARGS` in a pseudo-terminal (like bench_tui.py and rss_breakdown.py: 160x48,
TERM=xterm-256color) through a small wrapper in the same interpreter that, --after seconds in,
writes to --out:

- the modules loaded (sys.modules), with each top-level package's count;
- with --trace: tracemalloc's view of the Python heap (--frames deep), grouped two ways: by the
  first frame in gpumix (who asked for it: our code, or "import" when the frame is an import, or
  "(no gpumix frame)") and by the innermost file (which library holds it: code objects, caches);
- the process's VmRSS/VmHWM/RssAnon at that moment.

Issue 13 (RSS <= nvitop's + 10 MB): says which modules and which structures to cut.

    python benchmarks/heap_owners.py --after 15 --trace --out owners.json -- --sim benchmarks/rig_1gpu.toml --interval 1
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import threading
import time
from pathlib import Path
from typing import Any

TOP = 40


def status_kb() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0])
    return fields


def owner_in_gpumix(trace: Any) -> str:
    """The innermost frame inside gpumix (file:line): the line of ours that asked for the memory."""
    for frame in reversed(trace):  # tracemalloc's frames run from the oldest to the newest
        name = frame.filename
        if "/gpumix/" in name or "/tui/" in name or "/agent/" in name:
            if "heap_owners" in name:
                continue
            return f"{name.split('/work/main/')[-1]}:{frame.lineno}"
    return "(no gpumix frame)"


def innermost_library(trace: Any) -> str:
    """The innermost frame outside importlib (tracemalloc's frames run from the oldest to the newest)."""
    name = next((frame.filename for frame in reversed(trace) if not frame.filename.startswith("<frozen")), "?")
    for marker in ("site-packages/", "python3.12/", "/work/main/"):
        if marker in name:
            return name.split(marker, 1)[1]
    return name


IMPORTERS: dict[str, list[str]] = {}


class ImporterRecorder:
    """A meta-path finder that finds nothing: it notes, for each module's first import, the importing
    frames (the innermost outside importlib, and the first in gpumix)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name not in IMPORTERS:
            frames = []
            frame = sys._getframe(1)
            while frame is not None:
                filename = frame.f_code.co_filename
                if not filename.startswith("<frozen") and "heap_owners" not in filename:
                    frames.append(f"{filename.split('site-packages/')[-1].split('/work/main/')[-1]}:{frame.f_lineno}")
                frame = frame.f_back
            IMPORTERS[name] = frames[:1] + [f for f in frames if "gpumix/" in f or f.startswith(("tui/", "agent/"))][:3]
        return None


def dump(out: Path, traced: bool) -> None:
    result: dict[str, Any] = {"status_kb": status_kb(), "modules": sorted(sys.modules),
                              "importers": {name: IMPORTERS.get(name) for name in sorted(sys.modules)}}
    tops: dict[str, int] = {}
    for name in sys.modules:
        top = name.split(".")[0]
        tops[top] = tops.get(top, 0) + 1
    result["modules_by_package"] = dict(sorted(tops.items(), key=lambda item: -item[1]))
    if traced:
        import tracemalloc

        snapshot = tracemalloc.take_snapshot()
        snapshot.dump(str(out.with_suffix(".snapshot")))  # for other groupings: tracemalloc.Snapshot.load
        by_owner: dict[str, int] = {}
        by_library: dict[str, int] = {}
        by_owner_detail: dict[str, int] = {}
        total = 0
        for stat in snapshot.statistics("traceback"):
            total += stat.size
            owner = owner_in_gpumix(stat.traceback)
            by_owner[owner.split(":")[0]] = by_owner.get(owner.split(":")[0], 0) + stat.size
            by_owner_detail[owner] = by_owner_detail.get(owner, 0) + stat.size
            library = innermost_library(stat.traceback)
            by_library[library] = by_library.get(library, 0) + stat.size
        result["traced_total_kb"] = total // 1024
        result["traced_by_first_gpumix_file_kb"] = {k: v // 1024 for k, v in sorted(by_owner.items(), key=lambda i: -i[1])[:TOP]}
        result["traced_by_first_gpumix_line_kb"] = {k: v // 1024 for k, v in sorted(by_owner_detail.items(), key=lambda i: -i[1])[:TOP]}
        result["traced_by_innermost_file_kb"] = {k: v // 1024 for k, v in sorted(by_library.items(), key=lambda i: -i[1])[:TOP]}
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.rename(out)  # whole: the parent waits for this name


def child(after_s: float, out: Path, traced: bool, frames: int, argv: list[str]) -> int:
    if traced:
        import tracemalloc

        tracemalloc.start(frames)
    sys.meta_path.insert(0, ImporterRecorder())
    timer = threading.Timer(after_s, dump, (out, traced))
    timer.daemon = True
    timer.start()
    from gpumix.tui.main import main

    return main(argv)


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # here, not in the child: its modules stay its own
    from bench_tui import spawn_in_pty, stop  # a sibling script, not a package

    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--after", str(args.after), "--out", str(args.out),
               "--frames", str(args.frames), *(["--trace"] if args.trace else []), "--", *argv]
    pid, master = spawn_in_pty(command, args.cols, args.rows)
    args.out.unlink(missing_ok=True)
    deadline = time.monotonic() + args.after + 180  # a traced snapshot of the heap takes a while
    while time.monotonic() < deadline and not args.out.exists():  # drain the terminal meanwhile
        if select.select([master], [], [], 0.05)[0]:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break
    print(stop(pid, master, b"q", bytearray()))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--after", type=float, default=15.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--cols", type=int, default=160)
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if args.child:
        return child(args.after, args.out, args.trace, args.frames, argv)
    return parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())
