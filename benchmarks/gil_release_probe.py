"""Which calls on a CPU tensor hand the GIL to a thread waiting for it (issue 13)?

A helper thread keeps wanting the GIL (it sleeps 0.1 ms, then spins 1 ms of Python); the main thread
spins 0.2 ms (untimed, like a step's body) and then times one call. A call that releases the GIL (an
operator call of torch's bindings: item(), float(), is_complex()) lets the helper take it, and the
call then waits for the helper's spin; one that does not (numel(), tolist() on a CPU tensor) waits
only when a forced switch (sys.getswitchinterval()) happens to fall on it. The agent's step makes only
calls of the second kind on the training thread (agent/values.py).

    .venv/bin/python benchmarks/gil_release_probe.py --calls 3000 --out /tmp/gil_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch


def spin(seconds: float) -> None:
    """Python work that holds the GIL (no sleep)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def probe(call: Callable[[], object], calls: int) -> dict:
    """Calls of `call` that waited more than 0.5 ms, and the mean µs per call."""
    slow, total_s = 0, 0.0
    for _ in range(calls):
        spin(0.0002)
        started = time.perf_counter()
        call()
        took_s = time.perf_counter() - started
        total_s += took_s
        slow += took_s > 0.0005
    return {"calls_over_0_5_ms": slow, "calls": calls, "mean_us": total_s / calls * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", metavar="FILE")
    args = parser.parse_args()
    stop = threading.Event()

    def helper() -> None:
        while not stop.is_set():
            time.sleep(0.0001)
            spin(0.001)

    tensor = torch.ones(())
    candidates: dict[str, Callable[[], object]] = {
        "nothing": lambda: None, "item()": tensor.item, "float()": lambda: float(tensor),
        "is_complex()": tensor.is_complex, "numel()": tensor.numel, "tolist()": tensor.tolist,
        "dtype.is_complex": lambda: tensor.dtype.is_complex}
    thread = threading.Thread(target=helper, daemon=True)
    thread.start()
    try:
        results = {name: probe(call, args.calls) for name, call in candidates.items()}
    finally:
        stop.set()
        thread.join()
    text = json.dumps({"command": " ".join([Path(sys.executable).name, *sys.argv]), "torch": torch.__version__,
                       "python": sys.version.split()[0], "load_avg_1_5_15": list(os.getloadavg()),
                       "results": results}, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
