"""Profile a Python program with cProfile in every thread, for a while, and say where the time went.

The hub and the TUI do their work in threads (the sampler, the asyncio server, Textual's driver),
which plain `python -m cProfile` does not see before Python 3.12. This starts a profiler in each
new thread (on 3.12+ one profiler already sees them all), runs the module or script, stops it on
SIGTERM/SIGINT or after --seconds, and writes the merged stats (pstats, for snakeviz or
`python -m pstats`) and the top entries as text:

    python benchmarks/profile_threads.py --seconds 20 --out hub.prof --top hub_top.txt -- -m gpumix.cli.main hub
    python benchmarks/profile_threads.py --out tui.prof --top tui_top.txt -- -m gpumix.tui.main --interval 1

With --by-thread F.json, each thread's calls a second and profiled time a second by owner (the TUI,
the rest of gpumix, Textual, Rich, asyncio, the standard library, builtins), waits left out.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import runpy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

_profiles: list[cProfile.Profile] = []
_thread_names: list[str] = []  # the thread each profile counts, by position in _profiles
_lock = threading.Lock()
# Where a thread waits, not works: left out of the CPU shares of --by-thread.
WAITS = ("acquire' of '_thread.lock", "get' of '_queue.SimpleQueue", "select.select", "poll' of 'select.epoll",
         "time.sleep", "wait' of 'threading.Condition")


def _start_in_thread(*_: Any) -> None:
    """threading.setprofile hook: the first event of each new thread starts that thread's profiler."""
    profile = cProfile.Profile()
    try:
        profile.enable()  # replaces this hook for the thread
    except ValueError:  # 3.12+: the main thread's profiler already sees every thread
        sys.setprofile(None)
        return
    with _lock:
        _profiles.append(profile)
        _thread_names.append(threading.current_thread().name)


def _stop(*_: Any) -> None:
    raise KeyboardInterrupt


_started = [time.monotonic()]  # when the profiles' counting began (reset by --skip)


def _forget_start_up() -> None:
    """--skip: drop what every profiler counted so far (imports, CSS parsing, the first layout), so the
    tables show the steady state only. Profiler.clear() from another thread is safe under the GIL: a
    profiled function that returns into a cleared context is simply not counted."""
    with _lock:
        for profile in _profiles:
            profile.clear()
        _started[0] = time.monotonic()


def owner(filename: str, function: str) -> str:
    """Whose code a profile entry is: the TUI's, the rest of gpumix (hub, hw, sim, wire), Textual,
    Rich, asyncio, the rest of the standard library, or a builtin (C) function."""
    if filename == "~":
        return "builtin"
    for part, name in (("/site-packages/textual/", "textual"), ("/site-packages/rich/", "rich"),
                       ("/site-packages/", "other packages"), ("/asyncio/", "asyncio")):
        if part in filename:
            return name
    if "/tui/" in filename:
        return "tui"
    if "/gpumix/" in filename or "/agent/" in filename:
        return "gpumix"
    return "stdlib" if "/python3" in filename else "other"


def is_wait(function: str) -> bool:
    return any(wait in function for wait in WAITS)


def by_thread(named: list[tuple[str, pstats.Stats]], wall_s: float) -> dict[str, Any]:
    """Per thread: calls a second, and the profiled time a second (waits left out) by owner. cProfile
    slows what it counts, so the times are shares, the call counts exact."""
    threads = []
    for name, stats in named:
        calls, time_s, owners = 0, 0.0, {}
        for (filename, _, function), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            if is_wait(function):
                continue
            who = owner(filename, function)
            entry = owners.setdefault(who, {"calls": 0, "time_s": 0.0})
            entry["calls"] += ncalls
            entry["time_s"] += tottime
            calls += ncalls
            time_s += tottime
        threads.append({"thread": name, "calls_per_s": round(calls / wall_s, 1),
                        "profiled_ms_per_s": round(1000 * time_s / wall_s, 3),
                        "owners": {who: {"calls_per_s": round(e["calls"] / wall_s, 1),
                                         "profiled_ms_per_s": round(1000 * e["time_s"] / wall_s, 3)}
                                   for who, e in sorted(owners.items(), key=lambda kv: -kv[1]["time_s"])}})
    return {"wall_s": round(wall_s, 2), "threads": sorted(threads, key=lambda t: -t["profiled_ms_per_s"])}


def report(out: Path | None, top: Path | None, wall_s: float, entries: int, threads_out: Path | None = None) -> None:
    with _lock:
        profiles = list(zip(_profiles, _thread_names, strict=True))
    stats: pstats.Stats | None = None
    named: list[tuple[str, pstats.Stats]] = []
    for profile, name in profiles:
        try:
            profile.disable()  # only the calling thread's; the others' data is read as it stands
        except ValueError:
            pass
        try:
            named.append((name, pstats.Stats(profile)))  # type: ignore[arg-type]
            stats = pstats.Stats(profile) if stats is None else stats.add(profile)  # type: ignore[arg-type]
        except TypeError:  # a thread that never recorded a call
            continue
    if stats is None:
        return
    if threads_out:
        threads_out.write_text(json.dumps(by_thread(named, wall_s), indent=1))
    if out:
        stats.dump_stats(str(out))
    text = io.StringIO()
    seen = "every thread" if sys.version_info >= (3, 12) else f"{len(profiles)} threads"
    text.write(f"# cProfile over {wall_s:.1f} s of wall time, {seen} (Python {sys.version.split()[0]}); the waits"
               " (lock acquire, sleep, poll) are idle time\n")
    for order in ("tottime", "cumulative"):
        stats.stream = text  # type: ignore[attr-defined]
        stats.sort_stats(order).print_stats(entries)
    if top:
        top.write_text(text.getvalue())
    else:
        sys.stderr.write(text.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s [--seconds S] [--skip S] [--out F.prof] [--top F.txt] -- (-m MODULE | SCRIPT) ARGS...")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (default: when it ends or on SIGTERM)")
    parser.add_argument("--out", type=Path, help="merged pstats file")
    parser.add_argument("--top", type=Path, help="top entries as text (default: stderr)")
    parser.add_argument("--entries", type=int, default=40, help="entries per table (default 40)")
    parser.add_argument("--by-thread", type=Path, metavar="F.json",
                        help="per thread: calls a second and profiled time by owner (tui, gpumix, textual, rich, ...)")
    parser.add_argument("--skip", type=float, default=0.0,
                        help="forget the first S seconds (start-up), count from then on (default 0)")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        parser.error("name what to run after --: -m MODULE ARGS or SCRIPT ARGS")
    module = target[1] if target[0] == "-m" and len(target) > 1 else None
    sys.argv = target[1:] if module else target
    signal.signal(signal.SIGTERM, _stop)
    if args.seconds > 0:
        # to the process, not this thread: the main thread's wait wakes for it
        timer = threading.Timer(args.seconds, lambda: os.kill(os.getpid(), signal.SIGTERM))
        timer.daemon = True
        timer.start()
    if args.skip > 0:
        skip = threading.Timer(args.skip, _forget_start_up)
        skip.daemon = True
        skip.start()
    main_profile = cProfile.Profile()
    _profiles.append(main_profile)
    _thread_names.append(threading.current_thread().name)
    threading.setprofile(_start_in_thread)
    _started[0] = time.monotonic()
    code = 0
    main_profile.enable()
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target[0], run_name="__main__")
    except KeyboardInterrupt:
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0
    finally:
        main_profile.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
        report(args.out, args.top, time.monotonic() - _started[0], args.entries, args.by_thread)
    return code


if __name__ == "__main__":
    sys.exit(main())
