"""What a terminal monitor costs while it runs: CPU, memory, bytes to the terminal.

Runs a command (default: `gpumix-top --demo --interval 1`) in a pseudo-terminal
of 80x24 (TERM=xterm-256color, COLUMNS/LINES and the pty's window size set),
drains the pty continuously for N seconds, and reports, after a warm-up:

- CPU as a percentage of one core (user + system time from psutil over the
  measuring window), of the monitor process and of its whole process tree;
- peak RSS of the monitor process (polled, and the kernel's high-water mark
  VmHWM) and of the tree;
- bytes written to the terminal per second.

Peer commands (`--peer "nvitop --interval 1"`, repeatable) run one after the
other through the same harness, so both are measured in one run:

    python benchmarks/bench_tui.py --seconds 30 --out tui.json -- gpumix-top --demo --interval 1
    python benchmarks/bench_tui.py --out tui.json --peer "nvitop --interval 1" -- gpumix-top --interval 1

With --repeats N the commands run in N rounds, the order reversed every other round (A B, B A,
...: a drift of the machine falls on both alike), and the summary gives each command's median
over the rounds and its ratio to the first command's median (issue 13: gpumix-top against
nvitop on the same GPU, in one run).

Goals (checked for every run, meant for gpumix-top --demo at 1 s): <= 3 % of a
core, <= 150 MB RSS, <= 5 kB/s to the terminal. CPU and RSS goals judge the
monitor process: `gpumix-top --demo` also starts ten simulated training ranks
(child processes), which are the job being watched, not the monitor; the tree
figures and a per-process list are in the JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import platform
import pty
import re
import select
import shlex
import signal
import statistics
import struct
import sys
import termios
import time
from pathlib import Path
from typing import Any

import psutil

GOAL_CPU_PCT = 3.0
GOAL_RSS_MB = 150.0
GOAL_BYTES_PER_S = 5000.0  # 5 kB/s
DEFAULT_COMMAND = ["gpumix-top", "--demo", "--interval", "1"]
ANSI = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\|[@-Z\\-_]|\(.)")


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def spawn_in_pty(command: list[str], cols: int, rows: int, term: str = "xterm-256color") -> tuple[int, int]:
    """Run command in a new pseudo-terminal of cols x rows: (its pid, the terminal's master fd)."""
    env = dict(os.environ, TERM=term, COLUMNS=str(cols), LINES=str(rows))
    pid, master = pty.fork()
    if pid == 0:  # the child: stdin/stdout/stderr are the pty's slave
        try:
            set_winsize(1, rows, cols)
            os.execvpe(command[0], command, env)
        except Exception as error:  # exec failed: say why on the terminal
            os.write(2, f"cannot run {command[0]}: {error}\n".encode())
        os._exit(127)
    set_winsize(master, rows, cols)
    return pid, master


def tree(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return []


class TreeMeter:
    """Polls a process tree: cumulative CPU seconds per pid (last value seen, so a
    child that exits keeps what it used until its last poll), peak RSS of the
    tree and of each process, and what each process is."""

    def __init__(self, root: psutil.Process) -> None:
        self.root = root
        self.cpu_s: dict[int, float] = {}
        self.peak_rss_by_pid: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.peak_rss_bytes = 0
        self.peak_processes = 0

    def poll(self) -> None:
        rss = 0
        processes = tree(self.root)
        for process in processes:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    self.cpu_s[process.pid] = times.user + times.system
                    process_rss = process.memory_info().rss
                    self.names[process.pid] = " ".join(process.cmdline())[:120] or process.name()  # after exec
            except psutil.Error:
                continue
            rss += process_rss
            self.peak_rss_by_pid[process.pid] = max(self.peak_rss_by_pid.get(process.pid, 0), process_rss)
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        self.peak_processes = max(self.peak_processes, len(processes))

    def total_cpu_s(self) -> float:
        return sum(self.cpu_s.values())

    def snapshot(self) -> dict[int, float]:
        return dict(self.cpu_s)


def high_water_mark_bytes(pid: int) -> int | None:
    """VmHWM: the kernel's peak resident set size of one process."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def screen_text(raw: bytes, limit: int = 1500) -> str:
    """The printable tail of what the program wrote (escape sequences removed)."""
    text = ANSI.sub(b" ", raw).decode("utf-8", errors="replace")
    text = re.sub(r"\s+", " ", text).strip()
    return text[-limit:]


def run_one(command: list[str], seconds: float, warmup: float, cols: int, rows: int, term: str, quit_key: bytes) -> dict[str, Any]:
    pid, master = spawn_in_pty(command, cols, rows, term)
    root = psutil.Process(pid)
    meter = TreeMeter(root)
    started = time.monotonic()
    measure_from = started + warmup
    ends = measure_from + seconds
    bytes_warmup = 0
    bytes_measured = 0
    per_second = [0] * int(seconds + 1)
    cpu_per_second: list[float] = []
    tail = bytearray()
    cpu_at_start: float | None = None
    cpu_by_pid_at_start: dict[int, float] = {}
    wall_at_start = 0.0
    last_poll = 0.0
    last_cpu = (0.0, 0.0)
    alive = True
    while True:
        now = time.monotonic()
        if now >= ends:
            break
        if now - last_poll >= 0.5:
            meter.poll()
            last_poll = now
            if cpu_at_start is None and now >= measure_from:
                cpu_at_start, wall_at_start = meter.total_cpu_s(), now
                cpu_by_pid_at_start = meter.snapshot()
                last_cpu = (wall_at_start, cpu_at_start)
            elif cpu_at_start is not None and now - last_cpu[0] >= 1.0:
                total = meter.total_cpu_s()
                cpu_per_second.append(100.0 * (total - last_cpu[1]) / (now - last_cpu[0]))
                last_cpu = (now, total)
        readable, _, _ = select.select([master], [], [], 0.05)
        if not readable:
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the program exited and closed the terminal
            data = b""
        if not data:
            alive = False
            break
        now = time.monotonic()
        if now < measure_from:
            bytes_warmup += len(data)
        else:
            bytes_measured += len(data)
            per_second[min(len(per_second) - 1, int(now - measure_from))] += len(data)
        tail += data
        del tail[:-8192]
    meter.poll()
    window_end = time.monotonic()
    hwm = high_water_mark_bytes(pid)
    exit_status = stop(pid, master, quit_key, tail)
    cpu_s = meter.total_cpu_s() - cpu_at_start if cpu_at_start is not None else None
    window_s = window_end - wall_at_start if cpu_at_start is not None else None
    measured_s = max(1e-9, min(window_end, ends) - measure_from) if window_end > measure_from else None
    processes = []
    for process_pid, cpu_end in meter.cpu_s.items():
        used = cpu_end - cpu_by_pid_at_start.get(process_pid, 0.0)
        processes.append({
            "pid": process_pid,
            "main": process_pid == pid,
            "command": meter.names.get(process_pid),
            "cpu_pct_of_one_core": round(100.0 * used / window_s, 3) if window_s else None,
            "peak_rss_mb": round(meter.peak_rss_by_pid.get(process_pid, 0) / 1e6, 2),
        })
    main_process = next((p for p in processes if p["main"]), {"cpu_pct_of_one_core": None, "peak_rss_mb": None})
    result: dict[str, Any] = {
        "command": shlex.join(command),
        "seconds": seconds,
        "warmup_s": warmup,
        "terminal": f"{cols}x{rows} {term}",
        "alive_at_end": alive,
        "exit_status": exit_status,
        "cpu_pct_of_one_core": main_process["cpu_pct_of_one_core"],  # the monitor process itself
        "tree_cpu_pct_of_one_core": round(100.0 * cpu_s / window_s, 3) if cpu_s is not None and window_s else None,
        "tree_cpu_pct_per_second": {
            "median": round(statistics.median(cpu_per_second), 2) if cpu_per_second else None,
            "max": round(max(cpu_per_second), 2) if cpu_per_second else None,
        },
        "cpu_s_in_window": round(cpu_s, 4) if cpu_s is not None else None,
        "window_s": round(window_s, 3) if window_s else None,
        "peak_rss_mb": main_process["peak_rss_mb"],
        "tree_peak_rss_mb": round(meter.peak_rss_bytes / 1e6, 2),
        "vmhwm_main_mb": round(hwm / 1e6, 2) if hwm is not None else None,
        "peak_processes": meter.peak_processes,
        "processes": sorted(processes, key=lambda p: (not p["main"], -(p["cpu_pct_of_one_core"] or 0))),
        "bytes_warmup": bytes_warmup,
        "bytes_measured": bytes_measured,
        "bytes_per_s": round(bytes_measured / measured_s, 1) if measured_s else None,
        "bytes_per_second_series": per_second[: int(seconds)],
        "screen_tail": screen_text(bytes(tail)),
    }
    result["goals"] = {
        "cpu_pct_le_3": _le(result["cpu_pct_of_one_core"], GOAL_CPU_PCT),
        "rss_mb_le_150": _le(max(result["peak_rss_mb"] or 0.0, result["vmhwm_main_mb"] or 0.0), GOAL_RSS_MB),
        "bytes_per_s_le_5000": _le(result["bytes_per_s"], GOAL_BYTES_PER_S),
    }
    return result


SUMMARY_KEYS = ("cpu_pct_of_one_core", "tree_cpu_pct_of_one_core", "peak_rss_mb", "vmhwm_main_mb", "bytes_per_s")


def summarize(runs: list[dict[str, Any]], commands: int) -> list[dict[str, Any]]:
    """Each command's median over its rounds, and the ratio of its medians to the first command's."""
    lines = []
    for index in range(commands):
        mine = [run for run in runs if run["command_index"] == index]
        median = {}
        for key in SUMMARY_KEYS:
            values = [run[key] for run in mine if run[key] is not None]
            median[key] = round(statistics.median(values), 3) if values else None
        lines.append({"command": mine[0]["command"], "rounds": len(mine), "median": median,
                      "spread": {key: [run[key] for run in mine] for key in SUMMARY_KEYS},
                      "all_alive": all(run["alive_at_end"] for run in mine)})
    for line in lines[1:]:
        line["ratio_of_medians_to_first"] = {
            key: (round(line["median"][key] / lines[0]["median"][key], 2)
                  if line["median"][key] and lines[0]["median"][key] else None) for key in SUMMARY_KEYS}
    return lines


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def stop(pid: int, master: int, quit_key: bytes, tail: bytearray) -> str:
    """Ask politely (the quit key), then SIGTERM, then SIGKILL; drain the pty meanwhile."""
    steps = [(lambda: os.write(master, quit_key), 3.0), (lambda: os.kill(pid, signal.SIGTERM), 3.0), (lambda: os.kill(pid, signal.SIGKILL), 5.0)]
    for action, wait_s in steps:
        try:
            action()
        except OSError:
            pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                os.close(master)
                return describe_status(status)
            try:
                readable, _, _ = select.select([master], [], [], 0.05)
                if readable:
                    tail += os.read(master, 65536)
                    del tail[:-8192]
            except OSError:
                time.sleep(0.05)
    os.close(master)
    return "did not exit"


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s [options] [--peer CMD ...] [-- COMMAND ARGS...]",
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="measuring window after the warm-up (default 30)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring (default 5)")
    parser.add_argument("--cols", type=int, default=80)
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--term", default="xterm-256color")
    parser.add_argument("--quit-key", default="q", help="key that quits the program at the end (default q)")
    parser.add_argument("--peer", action="append", default=[], metavar="CMD", help="another command measured the same way (repeatable)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of all commands, order reversed every other round (default 1)")
    parser.add_argument("--label", default="", help="free text stored with the result (e.g. idle, load)")
    parser.add_argument("--out", metavar="FILE.json", help="write the full result here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to measure (after --)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    commands = [command or DEFAULT_COMMAND] + [shlex.split(peer) for peer in args.peer]
    runs = []
    for round_index in range(max(1, args.repeats)):
        order = list(enumerate(commands))
        if round_index % 2:
            order.reverse()
        for command_index, cmd in order:
            print(f"bench_tui: {shlex.join(cmd)} for {args.warmup:g}+{args.seconds:g} s in {args.cols}x{args.rows}"
                  f" (round {round_index + 1})", file=sys.stderr, flush=True)
            run = run_one(cmd, args.seconds, args.warmup, args.cols, args.rows, args.term, args.quit_key.encode())
            run.update(round=round_index + 1, command_index=command_index)
            runs.append(run)
    result: dict[str, Any] = {
        "tool": "bench_tui",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "label": args.label,
        "argv": sys.argv[1:],
        "machine": {"hostname": platform.node(), "cpu_count": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "goals": {"cpu_pct_of_one_core": GOAL_CPU_PCT, "rss_mb": GOAL_RSS_MB, "bytes_per_s": GOAL_BYTES_PER_S},
        "runs": runs,
        "summary": summarize(runs, len(commands)),
    }
    for run in runs:
        first = next(r for r in runs if r["round"] == run["round"] and r["command_index"] == 0)
        if run is not first:
            run["ratio_to_first"] = {
                key: (round(run[key] / first[key], 2) if run[key] and first[key] else None)
                for key in SUMMARY_KEYS
            }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for line in result["summary"]:
        print(f"median of {line['rounds']}: {line['command']}: " + ", ".join(f"{k} {line['median'][k]}" for k in SUMMARY_KEYS)
              + (f"; ratio to first {line['ratio_of_medians_to_first']}" if line.get("ratio_of_medians_to_first") else ""))
    for run in runs:
        print(
            f"{run['command']}: CPU {run['cpu_pct_of_one_core']} % of a core (tree of {run['peak_processes']}:"
            f" {run['tree_cpu_pct_of_one_core']} %), peak RSS {run['peak_rss_mb']} MB (VmHWM {run['vmhwm_main_mb']} MB,"
            f" tree {run['tree_peak_rss_mb']} MB), {run['bytes_per_s']} B/s to the terminal"
            f" [{run['terminal']}, {run['seconds']:g} s after {run['warmup_s']:g} s; alive {run['alive_at_end']}, {run['exit_status']}]"
        )
        print(f"  goals: {run['goals']}" + (f"  ratio to first: {run['ratio_to_first']}" if "ratio_to_first" in run else ""))
        if not run["alive_at_end"]:
            print(f"  it exited early; its screen said: {run['screen_tail'][-400:]}")
    return 0 if all(run["alive_at_end"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
