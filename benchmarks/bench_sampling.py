"""What one hardware sample costs: gpumix's NvmlBackend.sample() against nvitop's API.

Times a full `NvmlBackend.sample()` (every per-tick reading, PCIe RX/TX
included) over N ticks after a warm-up, and reports the median and p90 per
tick and per GPU (tick time / GPU count). A second pass wraps the NVML module
to time each NVML function on its own (median per call and GPU), so the cost
of a tick can be read call by call. A third pass forces the PCIe fallback
(`nvmlDeviceGetPcieThroughput`, for drivers without the byte counters) to
show what it costs. With --guard-seconds S, a fourth pass ticks once a second for S seconds with the
PCIe wrap guard free to run, as in the hub, and counts the byte-counter reads (fields 197/198) and
the process's CPU time (issue 13: an idle H200 was read 15 times a second). Then, in the same run, nvitop's `Device` API reads the
same quantities (utilization, memory, power, power limit, temperature, fan,
clocks, processes, PCIe RX and TX) and the ratio is reported.

Read-only: it calls NVML getters only, never a setter.

    python benchmarks/bench_sampling.py --demo --out /tmp/sampling.json   # simulated rig
    python benchmarks/bench_sampling.py --out sampling.json               # real GPUs, nvitop beside

The goal it reports against: <= 2 ms per GPU (median tick / GPU count).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

GOAL_PER_GPU_MS = 2.0


# -- statistics ------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: p90 of 50 values is the 45th smallest."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))  # ceil
    return ordered[int(rank) - 1]


def summary(values: list[float], digits: int = 4) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": round(statistics.median(values), digits),
        "p90": round(percentile(values, 90), digits),
        "mean": round(statistics.fmean(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


# -- a timing wrapper around an NVML module ----------------------------------------


class TimedNvml:
    """Proxy for pynvml (or the simulator's look-alike): every `nvml*` function is
    timed on its way through. `refuse` names functions that answer NotSupported
    without reaching the driver (to force the backend onto a fallback path)."""

    def __init__(self, inner: Any, refuse: tuple[str, ...] = ()) -> None:
        self._inner = inner
        self._refuse = set(refuse)
        self.phase = "init"
        # (phase, function) -> list of seconds; (phase, function) -> {error name: count}
        self.times: dict[tuple[str, str], list[float]] = defaultdict(list)
        self.errors: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not name.startswith("nvml") or not callable(target):
            return target
        wrapped = self._wrap(name, target)
        setattr(self, name, wrapped)  # next lookups skip __getattr__
        return wrapped

    def _wrap(self, name: str, target: Callable[..., Any]) -> Callable[..., Any]:
        times, errors, refuse = self.times, self.errors, self._refuse
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            if name in refuse:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            start = clock()
            try:
                return target(*args, **kwargs)
            except Exception as error:
                errors[(self.phase, name)][type(error).__name__] += 1
                raise
            finally:
                times[(self.phase, name)].append(clock() - start)

        return timed

    def report(self, phase: str, ticks: int) -> dict[str, Any]:
        rows = {}
        for (row_phase, name), seconds in sorted(self.times.items(), key=lambda item: -statistics.median(item[1])):
            if row_phase != phase:
                continue
            micros = [s * 1e6 for s in seconds]
            rows[name] = {
                "calls": len(micros),
                "calls_per_tick": round(len(micros) / ticks, 3) if ticks else None,
                "median_us": round(statistics.median(micros), 2),
                "p90_us": round(percentile(micros, 90), 2),
                "total_us_per_tick": round(sum(micros) / ticks, 2) if ticks else None,
                "errors": dict(self.errors.get((phase, name), {})),
            }
        return rows

    def total_seconds(self, phase: str) -> float:
        return sum(sum(seconds) for (row_phase, _), seconds in self.times.items() if row_phase == phase)


def wrap_module_functions(module: Any, prefix: str = "nvmlDevice") -> tuple[TimedNvml, Callable[[], None]]:
    """Time every `nvmlDevice*` function of a module in place (for nvitop's libnvml,
    which looks functions up in its own module by name). Returns the recorder and an undo."""
    recorder = TimedNvml(module)
    recorder.phase = "tick"
    originals = {}
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith(prefix) and callable(value) and not isinstance(value, type):
            originals[name] = value
            setattr(module, name, recorder._wrap(name, value))

    def undo() -> None:
        for name, value in originals.items():
            setattr(module, name, value)

    return recorder, undo


# -- our backend -------------------------------------------------------------------


class Source:
    """Builds NvmlBackends over the real NVML or over a fresh simulated rig."""

    def __init__(self, demo: bool, sim_file: str | None) -> None:
        self.simulated = demo or sim_file is not None
        self.sim_file = sim_file
        self.machine: Any = None

    def backend(self, refuse: tuple[str, ...] = (), timed: bool = False) -> tuple[Any, TimedNvml | None]:
        from gpumix.hw.nvml_backend import NvmlBackend

        if self.simulated:
            from gpumix.sim.machine import SimMachine
            from gpumix.sim.nvml import SimNvml
            from gpumix.sim.rig import DEMO_RIG, load_builtin_rig, load_rig

            rig = load_rig(self.sim_file) if self.sim_file else load_builtin_rig(DEMO_RIG)
            self.machine = SimMachine(rig)
            inner: Any = SimNvml(self.machine)
        else:
            inner = pynvml
        recorder = TimedNvml(inner, refuse=refuse) if (timed or refuse) else None
        backend = NvmlBackend(nvml=recorder if recorder is not None else inner)
        return backend, recorder

    def advance(self) -> None:
        """The simulated machine moves on before each sample, as the hub does it."""
        if self.machine is not None:
            self.machine.tick()


def time_ticks(source: Source, backend: Any, ticks: int, warmup: int, interval_s: float, recorder: TimedNvml | None = None) -> dict[str, Any]:
    gpu_count = len(backend.gpus())
    wall: list[float] = []
    cpu: list[float] = []
    nvml_inside: list[float] = []
    for tick in range(warmup + ticks):
        source.advance()
        measured = tick >= warmup
        if recorder is not None:
            recorder.phase = "tick" if measured else "warmup"
        before_nvml = recorder.total_seconds("tick") if recorder is not None else 0.0
        cpu_start = time.thread_time()
        start = time.perf_counter()
        backend.sample()
        elapsed = time.perf_counter() - start
        cpu_elapsed = time.thread_time() - cpu_start
        if measured:
            wall.append(elapsed * 1e3)
            cpu.append(cpu_elapsed * 1e3)
            if recorder is not None:
                nvml_inside.append((recorder.total_seconds("tick") - before_nvml) * 1e3)
        if interval_s > 0:
            time.sleep(interval_s)
    per_gpu = [ms / gpu_count for ms in wall] if gpu_count else []
    result = {
        "gpu_count": gpu_count,
        "tick_ms": summary(wall),
        "per_gpu_ms": summary(per_gpu),
        "thread_cpu_ms_per_tick": summary(cpu),
    }
    if recorder is not None:
        result["python_overhead_ms_per_tick"] = summary([w - n for w, n in zip(wall, nvml_inside, strict=True)])
    return result


def guard_pass(source: Source, seconds: float) -> dict[str, Any]:
    """Ticks at 1 s for `seconds`, the wrap guard running by itself: counter reads and CPU."""
    backend, recorder = source.backend(timed=True)
    assert recorder is not None
    try:
        recorder.phase = "warmup"
        source.advance()
        backend.sample()  # the first reading: no rate yet, guarded until one says idle
        time.sleep(1.0)
        source.advance()
        backend.sample()
        recorder.phase = "guard"
        cpu0, wall0 = time.process_time(), time.monotonic()
        ticks, rates = 0, []
        while time.monotonic() - wall0 < seconds:
            time.sleep(max(0.0, wall0 + ticks + 1 - time.monotonic()))
            source.advance()
            samples = backend.sample()
            ticks += 1
            rates.append([[s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s] for s in samples])
        cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
        reads = len(recorder.times.get(("guard", "nvmlDeviceGetFieldValues"), []))
        return {
            "seconds": round(wall_s, 3), "ticks": ticks, "gpus": len(backend.gpus()),
            "field_value_reads": reads, "reads_per_s": round(reads / wall_s, 2),
            "guard_reads": reads - ticks * len(backend.gpus()),
            "process_cpu_pct_of_one_core": round(100 * cpu_s / wall_s, 3),
            "guarded_at_end": {str(index): counters.guarded for index, counters in backend._pcie.items()},
            "tx_rx_bytes_per_s_by_tick": rates,
        }
    finally:
        backend.close()


def bench_ours(source: Source, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # 1. Plain backend: the headline figure.
    backend, _ = source.backend()
    try:
        out["driver"] = vars_of(backend.driver_info())
        out["gpus"] = [gpu.name for gpu in backend.gpus()]
        out["sample"] = time_ticks(source, backend, args.ticks, args.warmup, args.interval)
        per_gpu_median = out["sample"]["per_gpu_ms"].get("median")
        out["goal_per_gpu_ms"] = GOAL_PER_GPU_MS
        out["goal_met"] = per_gpu_median is not None and per_gpu_median <= GOAL_PER_GPU_MS
        last = backend.sample()
        out["last_sample_pcie"] = [
            {"index": s.index, "rx_bytes_per_s": s.pcie_rx_bytes_per_s, "tx_bytes_per_s": s.pcie_tx_bytes_per_s,
             "link_gen": s.pcie_link_gen_current, "link_width": s.pcie_link_width_current}
            for s in last
        ]
        out["unsupported"] = {f"{gpu}:{call}": answer for (gpu, call), answer in sorted(backend.unsupported.items())}
    finally:
        backend.close()

    # 2. Every NVML call timed: where a tick's time goes.
    backend, recorder = source.backend(timed=True)
    assert recorder is not None
    try:
        out["timed_sample"] = time_ticks(source, backend, args.ticks, args.warmup, args.interval, recorder)
        out["calls_per_tick"] = recorder.report("tick", args.ticks)
        out["calls_at_start"] = recorder.report("init", 1)
    finally:
        backend.close()

    # 3. The fallback when the byte counters are refused: nvmlDeviceGetPcieThroughput.
    if args.fallback_ticks > 0:
        backend, recorder = source.backend(refuse=("nvmlDeviceGetFieldValues",))
        assert recorder is not None
        try:
            fallback = time_ticks(source, backend, args.fallback_ticks, 2, args.interval, recorder)
            fallback["calls_per_tick"] = {
                name: row for name, row in recorder.report("tick", args.fallback_ticks).items() if "Pcie" in name
            }
            out["pcie_fallback"] = fallback
        finally:
            backend.close()
    return out


def vars_of(record: Any) -> dict[str, Any]:
    return dataclasses.asdict(record)


# -- single calls the backend avoids or reads on a slow schedule ---------------------


def extra_call_costs(source: Source, repeats: int) -> dict[str, Any]:
    """Direct per-call cost of getters that are not read every tick (or read once)."""
    backend, recorder = source.backend(timed=True)
    assert recorder is not None
    nvml = recorder
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("nvmlDeviceGetTotalEnergyConsumption", ()),
        ("nvmlDeviceGetPcieThroughput", (pynvml.NVML_PCIE_UTIL_RX_BYTES,)),
        ("nvmlDeviceGetPowerManagementLimit", ()),
        ("nvmlDeviceGetPcieReplayCounter", ()),
        ("nvmlDeviceGetFieldValues", ([197, 198],)),
        ("nvmlDeviceGetPerformanceState", ()),
        ("nvmlDeviceGetFanSpeed", ()),
        ("nvmlDeviceGetProcessUtilization", (0,)),
        ("nvmlDeviceGetCurrPcieLinkWidth", ()),
        ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
        ("nvmlDeviceGetMemoryInfo", ()),
        ("nvmlDeviceGetUtilizationRates", ()),
        ("nvmlDeviceGetPowerUsage", ()),
    ]
    try:
        count = len(backend.gpus())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        recorder.phase = "extra"
        for name, extra in calls:
            for _ in range(repeats):
                for handle in handles:
                    with contextlib.suppress(pynvml.NVMLError, AttributeError, TypeError):
                        getattr(nvml, name)(handle, *extra)
        rows = recorder.report("extra", 1)
        for row in rows.values():
            row.pop("calls_per_tick", None)
            row.pop("total_us_per_tick", None)
        return rows
    finally:
        backend.close()


# -- the peer: nvitop's API ------------------------------------------------------------


NVITOP_READINGS = (
    "utilization_rates",  # util.gpu, util.memory
    "memory_info",
    "power_usage",
    "power_limit",
    "temperature",
    "fan_speed",
    "sm_clock",
    "memory_clock",
    "pcie_tx_throughput",
    "pcie_rx_throughput",
    "processes",
)


def bench_nvitop(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import nvitop
        from nvitop import Device
        from nvitop.api import libnvml
    except Exception as error:  # not installed, or no driver behind it
        return {"skipped": f"nvitop not importable: {error}"}
    try:
        devices = Device.all()
    except Exception as error:
        return {"skipped": f"nvitop could not open the GPUs: {error}"}
    if not devices:
        return {"skipped": "nvitop sees no GPU"}

    def read_all() -> list[dict[str, Any]]:
        values = []
        for device in devices:
            with device.oneshot():
                values.append({name: getattr(device, name)() for name in NVITOP_READINGS})
        return values

    def timed_ticks(ticks: int, warmup: int) -> list[float]:
        wall = []
        for tick in range(warmup + ticks):
            start = time.perf_counter()
            read_all()
            elapsed = time.perf_counter() - start
            if tick >= warmup:
                wall.append(elapsed * 1e3)
            if args.interval > 0:
                time.sleep(args.interval)
        return wall

    wall = timed_ticks(args.peer_ticks, args.warmup)
    recorder, undo = wrap_module_functions(libnvml)
    try:
        timed_ticks(args.peer_ticks, 0)
    finally:
        undo()
    last = read_all()
    return {
        "name": "nvitop",
        "version": getattr(nvitop, "__version__", None),
        "readings": list(NVITOP_READINGS),
        "gpu_count": len(devices),
        "tick_ms": summary(wall),
        "per_gpu_ms": summary([ms / len(devices) for ms in wall]),
        "calls_per_tick": recorder.report("tick", args.peer_ticks),
        "last_pcie_kib_per_s": [{"rx": r["pcie_rx_throughput"], "tx": r["pcie_tx_throughput"]} for r in last],
    }


# -- machine description ---------------------------------------------------------------


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def machine_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nvidia_ml_py": package_version("nvidia-ml-py"),
        "nvitop": package_version("nvitop"),
        "gpumix_top": package_version("gpumix-top"),
    }


# -- main --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated 10-GPU demo rig instead of real NVML")
    source.add_argument("--sim", metavar="RIG.toml", help="a simulated rig from a file")
    parser.add_argument("--ticks", type=int, default=50, help="measured ticks (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="ticks before measuring (default 5)")
    parser.add_argument("--interval", type=float, default=0.1, help="sleep between ticks in s (default 0.1)")
    parser.add_argument("--fallback-ticks", type=int, default=10, help="ticks with the PCIe fallback forced (0: skip)")
    parser.add_argument("--extra-repeats", type=int, default=5, help="repeats per single-call cost (0: skip)")
    parser.add_argument("--peer", choices=("nvitop", "none"), default="nvitop", help="peer to compare with (real NVML only)")
    parser.add_argument("--peer-ticks", type=int, default=20, help="measured ticks for the peer (default 20)")
    parser.add_argument("--guard-seconds", type=float, default=0.0, help="1 s ticks with the PCIe wrap guard running (0: skip)")
    parser.add_argument("--label", default="", help="free text stored with the result (e.g. idle, load)")
    parser.add_argument("--out", metavar="FILE.json", help="write the full result here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    source = Source(demo=args.demo, sim_file=args.sim)
    from gpumix.hw.types import NoDriverError

    try:
        ours = bench_ours(source, args)
    except NoDriverError as error:
        print(f"bench_sampling: {error}; try --demo", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "tool": "bench_sampling",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "label": args.label,
        "source": "sim" if source.simulated else "nvml",
        "machine": machine_info(),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "ours": ours,
    }
    if args.guard_seconds > 0:
        result["guard"] = guard_pass(source, args.guard_seconds)
    if args.extra_repeats > 0:
        result["single_calls"] = extra_call_costs(source, args.extra_repeats)
    if args.peer == "nvitop" and not source.simulated:
        peer = bench_nvitop(args)
    elif args.peer == "nvitop":
        peer = {"skipped": "nvitop reads real NVML only; the simulated rig has no driver behind it"}
    else:
        peer = {"skipped": "--peer none"}
    result["peer"] = peer
    if "per_gpu_ms" in peer:
        ours_median = ours["sample"]["per_gpu_ms"]["median"]
        peer_median = peer["per_gpu_ms"]["median"]
        result["ratio_peer_over_ours_per_gpu_median"] = round(peer_median / ours_median, 2) if ours_median else None

    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(text_summary(result))
    return 0


def text_summary(result: dict[str, Any]) -> str:
    ours = result["ours"]
    sample = ours["sample"]
    lines = [
        f"bench_sampling  {result['source']}  {sample['gpu_count']} GPU(s): {', '.join(sorted(set(ours['gpus'])))}"
        f"  {result['label']}".rstrip(),
        f"  gpumix NvmlBackend.sample(): tick median {sample['tick_ms']['median']:.3f} ms, p90 {sample['tick_ms']['p90']:.3f} ms;"
        f" per GPU median {sample['per_gpu_ms']['median']:.3f} ms, p90 {sample['per_gpu_ms']['p90']:.3f} ms"
        f"  (goal <= {GOAL_PER_GPU_MS} ms: {'met' if ours['goal_met'] else 'MISSED'})",
        f"  thread CPU per tick median {sample['thread_cpu_ms_per_tick']['median']:.3f} ms",
    ]
    timed = ours.get("timed_sample")
    if timed:
        lines.append(f"  python overhead per tick (tick - time inside NVML) median {timed['python_overhead_ms_per_tick']['median']:.3f} ms")
        lines.append("  per NVML call (median us per call and GPU, calls per tick):")
        for name, row in ours["calls_per_tick"].items():
            errors = f"  errors {row['errors']}" if row["errors"] else ""
            lines.append(f"    {name:<44} {row['median_us']:>9.1f} us  x{row['calls_per_tick']:<6}{errors}")
    fallback = ours.get("pcie_fallback")
    if fallback:
        lines.append(
            f"  PCIe fallback (nvmlDeviceGetPcieThroughput, parallel): tick median {fallback['tick_ms']['median']:.2f} ms,"
            f" per GPU {fallback['per_gpu_ms']['median']:.2f} ms"
        )
    if ours["unsupported"]:
        lines.append(f"  refused by the driver: {ours['unsupported']}")
    guard = result.get("guard")
    if guard:
        lines.append(f"  1 s ticks for {guard['seconds']} s, the wrap guard free: {guard['field_value_reads']} counter reads"
                     f" ({guard['guard_reads']} by the guard), process CPU {guard['process_cpu_pct_of_one_core']} % of a core,"
                     f" guarded at the end: {guard['guarded_at_end']}")
    single = result.get("single_calls")
    if single:
        lines.append("  single calls (median us; not all read per tick):")
        for name, row in single.items():
            errors = f"  errors {row['errors']}" if row["errors"] else ""
            lines.append(f"    {name:<44} {row['median_us']:>9.1f} us{errors}")
    peer = result["peer"]
    if "skipped" in peer:
        lines.append(f"  peer: skipped ({peer['skipped']})")
    else:
        lines.append(
            f"  nvitop {peer['version']} API, same readings: tick median {peer['tick_ms']['median']:.3f} ms,"
            f" per GPU median {peer['per_gpu_ms']['median']:.3f} ms, p90 {peer['per_gpu_ms']['p90']:.3f} ms;"
            f" ratio nvitop/gpumix {result.get('ratio_peer_over_ours_per_gpu_median')}x"
        )
        for name, row in list(peer["calls_per_tick"].items())[:8]:
            lines.append(f"    {name:<44} {row['median_us']:>9.1f} us  x{row['calls_per_tick']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
