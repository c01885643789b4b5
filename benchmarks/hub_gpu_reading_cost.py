"""What one real GPU costs the hub a tick, apart from the tick's fixed part (issue 13's hub goal is stated
for 10 GPUs; a box with one GPU can measure the per-GPU part and the rest, not ten real GPUs).

    python benchmarks/hub_gpu_reading_cost.py --ticks 20 --out gpu_reading_cost.json
    python benchmarks/hub_gpu_reading_cost.py --ticks 20 --alias-gpus 10 --out gpu_reading_cost_10.json

A real `Hub` on this machine's NVML ticks once a second, no rank and no client; each tick's process
CPU (time.process_time: the PCIe window's calls run on threads of their own) is split into the GPUs'
reading (`backend.sample()`, NVML's calls and our wrapper, timed inside the tick) and the rest (host,
processes, snapshot, history, merge). Per GPU = the GPUs' reading over the GPU count. The estimate for
N GPUs is rest + N x per GPU (the rest grows a little with N too: rows and history, which the simulated
10-GPU figure in docs/hub.md counts). That estimate is a ceiling: most of a one-GPU reading once a second
is paid once a tick, not once a GPU (benchmarks/alias_nvml.py); `--alias-gpus 10` reads the machine's GPU
as ten, each a real read, which gives a floor. Read-only: NVML getters only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gpus-for-estimate", type=int, default=10)
    parser.add_argument("--sim", metavar="RIG", help="a dry run on a simulated rig (its world is counted in the reading)")
    parser.add_argument("--by-call", action="store_true",
                        help="also time each NVML function the backend asks through its module (process CPU per call)")
    parser.add_argument("--alias-gpus", type=int, metavar="N",
                        help="read the machine's GPUs as N (benchmarks/alias_nvml.py: each a real one in turn)")
    parser.add_argument("--out")
    args = parser.parse_args()
    from gpumix.cli.hardware import open_hardware
    from gpumix.hub.core import Hub

    by_call: dict[str, list[float]] = {}
    if (args.by_call or args.alias_gpus) and not args.sim:
        import pynvml

        from gpumix.hw.hardware import Hardware
        from gpumix.hw.nvml_backend import NvmlBackend

        class TimedNvml:  # pynvml, each function's process CPU per call filed by name
            def __getattr__(self, name: str):
                real = getattr(pynvml, name)
                if not callable(real) or not name.startswith("nvml"):
                    return real

                def timed(*call_args):
                    started = time.process_time()
                    try:
                        return real(*call_args)
                    finally:
                        by_call.setdefault(name, []).append(time.process_time() - started)
                return timed

        nvml: Any = TimedNvml() if args.by_call else pynvml
        if args.alias_gpus:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from alias_nvml import AliasNvml

            nvml = AliasNvml(args.alias_gpus, base=nvml)
        hub = Hub(Hardware(backend=NvmlBackend(nvml=nvml), source="nvml"))
        by_call.clear()  # the start's calls are not a tick's
    else:
        hub = Hub(open_hardware(sim_file=args.sim))
    backend = hub.hardware.backend
    reading_s: list[float] = []
    pcie_rates: list[list[list[float | None]]] = []  # per tick, per GPU: [tx, rx] bytes/s as the tick read them
    real_sample = backend.sample

    def timed_sample():  # the GPUs' reading inside the tick, in process CPU
        started = time.process_time()
        try:
            samples = real_sample()
        finally:
            reading_s.append(time.process_time() - started)
        pcie_rates.append([[s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s] for s in samples])
        return samples

    backend.sample = timed_sample
    ticks_s: list[float] = []
    next_s = time.monotonic()
    for tick in range(args.warmup + args.ticks):
        if tick == args.warmup:  # calls counted over the measured ticks only (a schedule may settle in the warm-up)
            by_call.clear()
        started = time.process_time()
        hub.tick()
        if tick >= args.warmup:
            ticks_s.append(time.process_time() - started)
        next_s += 1.0
        time.sleep(max(0.0, next_s - time.monotonic()))
    readings = reading_s[args.warmup:]
    gpus = len(backend.gpus())
    tick_ms = statistics.fmean(ticks_s) * 1e3
    reading_ms = statistics.fmean(readings) * 1e3
    per_gpu_ms = reading_ms / gpus
    rest_ms = tick_ms - reading_ms
    n = args.gpus_for_estimate
    import gpumix

    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "gpumix_from": gpumix.__path__[0], "gpus": gpus,
              "names": sorted({info.name for info in backend.gpus()}), "ticks": args.ticks,
              "aliased": bool(args.alias_gpus),  # the GPUs are the machine's real ones read in turn
              "tick_cpu_ms_mean": tick_ms, "tick_cpu_ms_median": statistics.median(ticks_s) * 1e3,
              "gpu_reading_cpu_ms_mean": reading_ms,
              "gpu_reading_cpu_ms_median": statistics.median(readings) * 1e3, "per_gpu_cpu_ms": per_gpu_ms, "rest_cpu_ms": rest_ms,
              f"estimate_{n}_gpus_no_rank_pct_of_one_core": (rest_ms + n * per_gpu_ms) / 10.0,
              "by_call_cpu_us": {name: {"calls_per_tick": len(times) / args.ticks,
                                         "mean_us": statistics.fmean(times) * 1e6} for name, times in sorted(by_call.items())},
              "ticks_cpu_ms": [t * 1e3 for t in ticks_s], "readings_cpu_ms": [r * 1e3 for r in readings],
              "pcie_tx_rx_bytes_per_s_ticks": pcie_rates[args.warmup:]}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
