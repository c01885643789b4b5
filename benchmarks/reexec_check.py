"""Did gpumix-top re-execute itself at -OO (gpumix/cli/docstring_free.py)? Starts the monitor in a
pseudo-terminal, waits, and reads what the kernel holds for it: the environment its last exec got
(/proc/PID/environ: PYTHONOPTIMIZE=2 and GPUMIX_TOP_REEXEC after the re-exec), its command line and
its memory (VmHWM, VmRSS). Writes JSON.

    python benchmarks/reexec_check.py --out reexec.json [-- gpumix-top --interval 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tui import spawn_in_pty  # noqa: E402

WATCHED = ("PYTHONOPTIMIZE", "PYTHONNODEBUGRANGES", "PYTHONPYCACHEPREFIX", "GPUMIX_TOP_REEXEC", "GPUMIX_TOP_DOCSTRINGS")


def drain(master: int, seconds: float) -> None:
    """Read the terminal for `seconds` so the monitor never blocks on a full pty."""
    end = time.monotonic() + seconds
    os.set_blocking(master, False)
    while time.monotonic() < end:
        try:
            os.read(master, 65536)
        except (BlockingIOError, OSError):
            time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("command", nargs="*", default=["gpumix-top", "--interval", "1"])
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"] or ["gpumix-top", "--interval", "1"]
    pid, master = spawn_in_pty(command, 160, 48)
    try:
        drain(master, args.seconds)
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        watched = {k: v for k, _, v in (e.decode(errors="replace").partition("=") for e in environ) if k in WATCHED}
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        status = {k: v.strip() for k, _, v in (line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines())
                  if k in ("VmHWM", "VmRSS", "Name")}
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)
    result = {"command": command, "pid": pid, "exec_environment": watched, "reexecuted": "GPUMIX_TOP_REEXEC" in watched,
              "cmdline": [c for c in cmdline if c], "status": status}
    text = json.dumps(result, indent=1)
    print(text)
    Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
