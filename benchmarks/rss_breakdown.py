"""Where a running monitor's resident memory goes: one reading of /proc/PID/smaps, grouped.

Runs a command in an 80x24 (or --cols x --rows) pseudo-terminal like bench_tui.py, waits
--warmup seconds, then reads the process's mappings and sums their resident size by kind:

- file-backed, per file (python, libpython, each extension module, libssl/libcrypto, libnvidia-ml ...);
- anonymous: the main heap ([heap]), thread stacks ([stack] and the 8 MiB thread mappings),
  glibc's per-thread malloc arenas (64 MiB reservations), pymalloc's arenas and other mmaps;

with VmRSS, VmHWM (the peak), RssAnon/RssFile/RssShmem and the thread count. Issue 13: the
dashboard's RSS against nvitop's; this says which part an import, a thread or a buffer is.

    python benchmarks/rss_breakdown.py --warmup 10 --out rss.json -- gpumix-top --sim benchmarks/rig_1gpu.toml
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import select
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import spawn_in_pty, stop  # noqa: E402 (a sibling script, not a package)

MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")
ARENA_RESERVATION_KB = 64 * 1024  # glibc's HEAP_MAX_SIZE on 64-bit: a thread arena reserves this much


def read_mappings(pid: int) -> list[dict[str, Any]]:
    """Each mapping of /proc/PID/smaps: its size, resident and anonymous kB, name and permissions."""
    mappings: list[dict[str, Any]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        match = MAPPING.match(line)
        if match:
            start, end, perms, name = match.groups()
            mappings.append({"size_kb": (int(end, 16) - int(start, 16)) // 1024, "perms": perms, "name": name,
                             "rss_kb": 0, "anon_kb": 0})
        elif mappings and line.startswith(("Rss:", "Anonymous:")):
            key = "rss_kb" if line.startswith("Rss:") else "anon_kb"
            mappings[-1][key] = int(line.split()[1])
    return mappings


def group(mappings: list[dict[str, Any]]) -> dict[str, int]:
    """Resident kB by kind. glibc lays a thread arena out as a 64 MiB-aligned reservation split into a
    read-write part and a PROT_NONE rest; a thread's stack is an 8 MiB mapping below a guard page."""
    groups: dict[str, int] = {}

    def add(kind: str, kb: int) -> None:
        groups[kind] = groups.get(kind, 0) + kb

    previous_guard = False
    for index, mapping in enumerate(mappings):
        name, rss = mapping["name"], mapping["rss_kb"]
        following = mappings[index + 1] if index + 1 < len(mappings) else None
        if name.startswith("/"):
            add("file " + os.path.basename(name), rss)
        elif name in ("[heap]", "[stack]"):
            add("anon " + name, rss)
        elif name:
            add("other " + name, rss)
        elif (following is not None and following["perms"].startswith("---") and not following["name"]
              and mapping["size_kb"] + following["size_kb"] == ARENA_RESERVATION_KB):
            add("anon thread malloc arenas", rss)
        elif mapping["size_kb"] == ARENA_RESERVATION_KB and mapping["perms"].startswith("rw"):
            add("anon thread malloc arenas", rss)
        elif previous_guard and mapping["perms"].startswith("rw") and mapping["size_kb"] >= 1024:
            add("anon thread stacks", rss)  # a thread's stack lies right above its 4 kB guard page
        else:
            add("anon other mmaps (pymalloc arenas, large objects)", rss)
        previous_guard = mapping["perms"].startswith("---") and mapping["size_kb"] == 4
    return dict(sorted(groups.items(), key=lambda item: -item[1]))


def status_fields(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
            fields[key] = int(value.split()[0])
    return fields


def measure(command: list[str], warmup_s: float, cols: int, rows: int) -> dict[str, Any]:
    pid, master = spawn_in_pty(command, cols, rows)
    deadline = time.monotonic() + warmup_s
    while time.monotonic() < deadline:  # drain the terminal so the program never blocks on a write
        readable, _, _ = select.select([master], [], [], 0.05)
        if readable:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break
    mappings = read_mappings(pid)
    status = status_fields(pid)
    threads = sorted(Path(f"/proc/{pid}/task/{task}/comm").read_text().strip()
                     for task in os.listdir(f"/proc/{pid}/task"))
    exit_status = stop(pid, master, b"q", bytearray())
    groups = group(mappings)
    return {"command": command, "warmup_s": warmup_s, "terminal": f"{cols}x{rows}", "status_kb": status,
            "thread_names": threads, "groups_kb": groups,
            "file_backed_kb": sum(kb for kind, kb in groups.items() if kind.startswith("file ")),
            "anonymous_kb": sum(kb for kind, kb in groups.items() if kind.startswith("anon ")),
            "exit_status": exit_status}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before the reading (default 10)")
    parser.add_argument("--cols", type=int, default=160)
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--top", type=int, default=20, help="groups printed (all go in the JSON)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    result = measure(command, args.warmup, args.cols, args.rows)
    result.update(tool="rss_breakdown", date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  machine={"hostname": platform.node(), "cpu_count": os.cpu_count()})
    status = result["status_kb"]
    print(f"{' '.join(command)}: VmRSS {status.get('VmRSS', 0) / 1024:.1f} MiB, VmHWM {status.get('VmHWM', 0) / 1024:.1f}"
          f" MiB (anon {status.get('RssAnon', 0) / 1024:.1f}, file {status.get('RssFile', 0) / 1024:.1f}),"
          f" {status.get('Threads')} threads: {', '.join(result['thread_names'])}")
    for kind, kb in list(result["groups_kb"].items())[: args.top]:
        print(f"  {kb / 1024:7.2f} MiB  {kind}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
