"""Run a Python script with every thread under cProfile, the stats in one pstats file at exit. Before
Python 3.12 cProfile sees the thread that enabled it only (a hub's ticks and its event loop run on others),
so each thread gets its own, merged at exit; since 3.12 one profile sees every thread.

    python benchmarks/profiled.py OUT.prof benchmarks/aliased_hub.py 10 hub --interval 1
    python benchmarks/profiled.py OUT.prof -m gpumix.cli.main hub --interval 1 --sim mixed-10

The hub exits cleanly on SIGTERM (bench_hub.py's stop), so the file is written. Read it with
`python -c "import pstats; pstats.Stats('OUT.prof').sort_stats('tottime').print_stats(40)"`.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import runpy
import sys
import threading

PROFILES: list[cProfile.Profile] = []
_thread_run = threading.Thread.run


def _profiled_run(self: threading.Thread) -> None:
    profile = cProfile.Profile()
    PROFILES.append(profile)
    profile.enable()
    try:
        _thread_run(self)
    finally:
        profile.disable()


def _dump(path: str) -> None:
    stats: pstats.Stats | None = None
    for profile in PROFILES:
        profile.disable()  # a daemon thread still running at exit
        profile.create_stats()
        if not profile.stats:  # type: ignore[attr-defined]
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is not None:
        stats.dump_stats(path)


def main() -> None:
    out, script, *argv = sys.argv[1:]
    if sys.version_info < (3, 12):  # since 3.12 cProfile rides sys.monitoring, one per interpreter: every
        threading.Thread.run = _profiled_run  # type: ignore[method-assign]  # thread's calls, and a second refused
    main_profile = cProfile.Profile()
    PROFILES.append(main_profile)
    atexit.register(_dump, out)
    main_profile.enable()
    if script == "-m":  # a module, as `python -m`
        sys.argv = argv
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *argv]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
