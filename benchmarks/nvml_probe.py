"""Print (and save as JSON) everything gpumix's NVML backend reads on this machine.

    python benchmarks/nvml_probe.py --out probe.json                 # real GPUs, idle
    python benchmarks/nvml_probe.py --out probe.json --load h2d,d2h,matmul
    python benchmarks/nvml_probe.py --demo                           # the simulated rig
    python benchmarks/nvml_probe.py load --kind h2d --seconds 60     # only the load (torch)

The probe: driver info, each GPU's static facts (GpuInfo), two samples one
second apart, the P2P/topology list, and `backend.unsupported` (which calls
the driver refused). It also shows how pynvml's P2P index constant behaves
(nvidia-ml-py 13 defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,)).

With --load, for each kind a torch process loads GPU 0 (h2d: pinned host ->
device copies, d2h: device -> host, matmul: bf16 products) while the probe
samples once a second: the PCIe RX/TX rates gpumix reports are set against
the copy rate the loader measured itself, and the link gen/width under load
against idle.

Read-only: NVML getters only. The load is ordinary CUDA work through torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pynvml

# -- the load (a separate process, so the probe's own timing stays clean) ---------------


def run_load(kind: str, seconds: float, report: str | None, device: str, size_mib: int) -> int:
    import torch

    use_cuda = device.startswith("cuda") and torch.cuda.is_available()
    dev = torch.device(device if use_cuda else "cpu")
    nbytes = size_mib * 1024 * 1024

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(dev)

    if kind in ("h2d", "d2h"):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=use_cuda)
        host.fill_(1)
        gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        src, dst = (host, gpu) if kind == "h2d" else (gpu, host)

        def step() -> int:
            dst.copy_(src, non_blocking=True)
            sync()
            return nbytes
    elif kind == "matmul":
        n = 8192 if use_cuda else 512
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16 if use_cuda else torch.float32)

        def step() -> int:
            for _ in range(10):
                a @ a  # noqa: B018 - the product is the load
            sync()
            return 0
    else:
        raise SystemExit(f"unknown load kind {kind}")

    for _ in range(3):  # warm-up: allocator, kernels, clocks
        step()
    out = open(report, "a", buffering=1) if report else None  # noqa: SIM115 - line-buffered log kept open
    print("READY", flush=True)
    ends = time.monotonic() + seconds
    window_start, window_bytes, window_steps = time.monotonic(), 0, 0
    rates = []
    while time.monotonic() < ends:
        window_bytes += step()
        window_steps += 1
        now = time.monotonic()
        if now - window_start >= 1.0:
            rate = window_bytes / (now - window_start)
            rates.append(rate)
            record = {"t": time.time(), "kind": kind, "bytes_per_s": rate, "steps_per_s": window_steps / (now - window_start)}
            if out:
                out.write(json.dumps(record) + "\n")
            window_start, window_bytes, window_steps = now, 0, 0
    if out:
        out.close()
    if rates:
        print(f"load {kind}: median {statistics.median(rates) / 1e9:.2f} GB/s over {len(rates)} s", flush=True)
    return 0


# -- the raw PCIe byte counters (fields 197/198) under load ------------------------------


def read_counters(nvml: Any, handle: Any) -> dict[str, Any]:
    values = nvml.nvmlDeviceGetFieldValues(handle, [197, 198])
    tx, rx = values[0], values[1]
    return {
        "host_s": time.perf_counter(),
        "ts_us": [int(tx.timestamp), int(rx.timestamp)],
        "tx": int(tx.value.ullVal),
        "rx": int(rx.value.ullVal),
        "value_type": [int(tx.valueType), int(rx.valueType)],
        "ret": [int(tx.nvmlReturn), int(rx.nvmlReturn)],
    }


def counter_analysis(reads: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """How one cumulative counter behaves over a series of reads: does it wrap, and where?"""
    values = [r[key] for r in reads]
    stamps = [r["ts_us"][0 if key == "tx" else 1] for r in reads]
    drops = sum(1 for a, b in zip(values, values[1:], strict=False) if b < a)
    out: dict[str, Any] = {
        "reads": len(values),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "max_bits": max(values).bit_length() if values else None,
        "decreases": drops,
        "timestamp_changes": sum(1 for a, b in zip(stamps, stamps[1:], strict=False) if b != a),
    }
    if len(values) > 1 and stamps[-1] > stamps[0]:
        span_s = (stamps[-1] - stamps[0]) / 1e6
        increasing = [(b - a) / ((tb - ta) / 1e6) for a, b, ta, tb in zip(values, values[1:], stamps, stamps[1:], strict=False) if b >= a and tb > ta]
        out["rate_median_of_increasing_pairs"] = statistics.median(increasing) if increasing else None
        for bits in (32, 40, 48):
            modulus = 1 << bits
            total = sum((b - a) % modulus for a, b in zip(values, values[1:], strict=False))
            out[f"rate_unwrapped_mod_2^{bits}"] = total / span_s
        out["rate_naive_first_to_last"] = (values[-1] - values[0]) / span_s
    return out


def counters(args: argparse.Namespace) -> dict[str, Any]:
    """Reads fields 197/198 back to back (and at 10 ms, 100 ms, 1 s) while a copy load
    runs, with nvmlDeviceGetPcieThroughput beside them, to see how the counters behave."""
    nvml = pynvml
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    result: dict[str, Any] = {"tool": "nvml_probe counters", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "field_ids": {"tx": 197, "rx": 198}, "value_type_names": {0: "double", 1: "uint", 2: "ulong", 3: "ulonglong", 4: "slonglong", 5: "sint", 6: "ushort"}}

    def series(duration_s: float, gap_s: float) -> list[dict[str, Any]]:
        reads = []
        ends = time.perf_counter() + duration_s
        while time.perf_counter() < ends:
            reads.append(read_counters(nvml, handle))
            if gap_s:
                time.sleep(gap_s)
        return reads

    def throughput() -> dict[str, Any]:
        return {
            "rx_kb_per_s": nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES),
            "tx_kb_per_s": nvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        }

    idle = series(0.5, 0.0)
    result["idle"] = {"tx": counter_analysis(idle, "tx"), "rx": counter_analysis(idle, "rx"), "first_read": idle[0], "throughput": throughput()}
    for kind in args.load.split(","):
        load = Loader(kind, args.seconds, args.load_device)
        load.wait_ready()
        phase: dict[str, Any] = {"kind": kind}
        for label, duration, gap in (("back_to_back", 1.0, 0.0), ("every_10ms", 1.0, 0.01), ("every_100ms", 1.5, 0.1), ("every_1s", 4.0, 1.0)):
            reads = series(duration, gap)
            phase[label] = {"tx": counter_analysis(reads, "tx"), "rx": counter_analysis(reads, "rx")}
            if label == "back_to_back":
                phase["first_reads"] = reads[:3]
                phase["value_types"] = sorted({tuple(r["value_type"]) for r in reads})
                phase["returns"] = sorted({tuple(r["ret"]) for r in reads})
        phase["throughput"] = [throughput() for _ in range(3)]
        copies = load.copies()
        phase["loader_bytes_per_s_median"] = statistics.median([c["bytes_per_s"] for c in copies]) if copies else None
        phase["loader_output"] = load.lines[-3:]
        result[kind] = phase
    nvml.nvmlShutdown()
    return result


def counters_summary(result: dict[str, Any]) -> str:
    lines = [f"PCIe byte counters (fields 197 tx / 198 rx), GPU 0; idle first read {result['idle']['first_read']}"]
    for kind in [k for k in result if isinstance(result[k], dict) and "loader_bytes_per_s_median" in result[k]]:
        phase = result[kind]
        lines.append(f"  {kind}: loader {fmt_rate(phase['loader_bytes_per_s_median'])}; value types {phase['value_types']}; PcieThroughput {phase['throughput']}")
        for label in ("back_to_back", "every_10ms", "every_100ms", "every_1s"):
            for key in ("rx", "tx"):
                a = phase[label][key]
                lines.append(
                    f"    {label:<12} {key}: reads {a['reads']} decreases {a['decreases']} max {a['max']} ({a['max_bits']} bits)"
                    f" ts changes {a['timestamp_changes']}; rate increasing pairs {fmt_rate(a.get('rate_median_of_increasing_pairs'))},"
                    f" mod 2^32 {fmt_rate(a.get('rate_unwrapped_mod_2^32'))}, naive {fmt_rate(a.get('rate_naive_first_to_last'))}"
                )
    return "\n".join(lines)


# -- the probe ---------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value


def p2p_constant_check(backend: Any, nvml: Any) -> dict[str, Any]:
    """How the binding's P2P index constants look, and what passing them does."""
    names = [n for n in dir(pynvml) if n.startswith("NVML_P2P_CAPS_INDEX_")]
    out: dict[str, Any] = {"constants": {n: repr(getattr(pynvml, n)) for n in sorted(names)}}
    handles = backend._handles  # the probe looks inside on purpose: raw calls below
    if not handles or handles[0] is None:
        return out
    a = handles[0]
    b = handles[1] if len(handles) > 1 and handles[1] is not None else handles[0]
    out["pair"] = "0-1" if b is not a else "0-0 (one GPU: the GPU with itself)"
    for label, index in (("tuple constant NVML_P2P_CAPS_INDEX_READ", getattr(pynvml, "NVML_P2P_CAPS_INDEX_READ", None)), ("int 0 (READ)", 0), ("int 4 (PCI)", 4)):
        try:
            out[label] = {"answer": nvml.nvmlDeviceGetP2PStatus(a, b, index)}
        except Exception as error:  # the binding's ctypes error is what we want to see
            out[label] = {"error": f"{type(error).__name__}: {error}"}
    return out


RAW_READS = (
    ("nvmlDeviceGetPerformanceState", ()),
    ("nvmlDeviceGetPcieSpeed", ()),
    ("nvmlDeviceGetPcieLinkMaxSpeed", ()),
    ("nvmlDeviceGetCurrPcieLinkGeneration", ()),
    ("nvmlDeviceGetCurrPcieLinkWidth", ()),
    ("nvmlDeviceGetGpuMaxPcieLinkGeneration", ()),
    ("nvmlDeviceGetMaxPcieLinkGeneration", ()),
    ("nvmlDeviceGetMaxPcieLinkWidth", ()),
    ("nvmlDeviceGetPowerManagementLimit", ()),
    ("nvmlDeviceGetPowerManagementLimitConstraints", ()),
    ("nvmlDeviceGetEnforcedPowerLimit", ()),
    ("nvmlDeviceGetFanSpeed", ()),
    ("nvmlDeviceGetPcieReplayCounter", ()),
    ("nvmlDeviceGetTotalEnergyConsumption", ()),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetPersistenceMode", ()),
    ("nvmlDeviceGetComputeMode", ()),
    ("nvmlDeviceGetVbiosVersion", ()),
)


def raw_reads(backend: Any, nvml: Any, index: int) -> dict[str, Any]:
    """A few getters straight from the binding, answers or error names (GPU `index`)."""
    out: dict[str, Any] = {}
    handle = backend._handles[index]
    for name, args in RAW_READS:
        try:
            value = getattr(nvml, name)(handle, *args)
            out[name] = value.decode() if isinstance(value, bytes) else (list(value) if isinstance(value, tuple | list) else value)
        except Exception as error:
            out[name] = f"error {type(error).__name__}: {error}"
    return out


def compact_sample(sample: Any) -> dict[str, Any]:
    return {
        "util_gpu_pct": sample.util_gpu_pct,
        "power_w": sample.power_w,
        "sm_mhz": sample.clock_sm_mhz,
        "link": f"gen{sample.pcie_link_gen_current} x{sample.pcie_link_width_current}",
        "rx_bytes_per_s": sample.pcie_rx_bytes_per_s,
        "tx_bytes_per_s": sample.pcie_tx_bytes_per_s,
        "reasons": sample.clock_event_reasons,
        "procs": len(sample.processes),
    }


class Loader:
    """The load subprocess (this file's `load` command); `copies()` gives its per-second log."""

    def __init__(self, kind: str, seconds: float, device: str) -> None:
        self.kind = kind
        self.report = Path(f"/tmp/gpumix-probe-load-{os.getpid()}-{kind}.jsonl")
        self.report.unlink(missing_ok=True)
        command = [sys.executable, os.path.abspath(__file__), "load", "--kind", kind, "--seconds", str(seconds),
                   "--report", str(self.report), "--device", device]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read_output, daemon=True).start()

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())
            if line.startswith("READY"):
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        self._ready.wait(timeout_s)

    def copies(self) -> list[dict[str, Any]]:
        self.process.wait(timeout=60)
        copies = [json.loads(line) for line in self.report.read_text().splitlines()] if self.report.exists() else []
        self.report.unlink(missing_ok=True)
        return copies


def under_load(backend: Any, machine: Any, kind: str, seconds: float, device: str) -> dict[str, Any]:
    """Start the loader, sample once a second while it runs, compare rates."""
    load = Loader(kind, seconds, device)
    load.wait_ready()
    loader, lines = load.process, load.lines
    samples = []
    backend.sample()  # a counter reading to take differences from
    started = time.monotonic()
    while loader.poll() is None and time.monotonic() - started < seconds + 30:
        time.sleep(1.0)
        if machine is not None:
            machine.tick()
        for s in backend.sample():
            if s.index == 0:
                samples.append(compact_sample(s) | {"t": time.time()})
    copies = load.copies()
    steady = samples[1:-1] if len(samples) > 3 else samples  # drop the edges of the window
    result: dict[str, Any] = {
        "kind": kind,
        "loader_output": lines[-5:],
        "samples_gpu0": samples,
        "loader_bytes_per_s_median": statistics.median([c["bytes_per_s"] for c in copies]) if copies and kind != "matmul" else None,
        "loader_steps_per_s_median": statistics.median([c["steps_per_s"] for c in copies]) if copies else None,
    }
    for key in ("rx_bytes_per_s", "tx_bytes_per_s"):
        values = [s[key] for s in steady if s[key] is not None]
        result[f"gpumix_{key}_median"] = statistics.median(values) if values else None
    links = sorted({s["link"] for s in steady})
    result["links_seen"] = links
    copy_rate = result["loader_bytes_per_s_median"]
    ours = result["gpumix_rx_bytes_per_s_median"] if kind == "h2d" else result["gpumix_tx_bytes_per_s_median"] if kind == "d2h" else None
    if copy_rate and ours:
        result["ratio_gpumix_over_copy_rate"] = round(ours / copy_rate, 3)
    return result


def probe(args: argparse.Namespace) -> dict[str, Any]:
    from gpumix.cli.hardware import open_hardware

    hardware = open_hardware(demo=args.demo, sim_file=args.sim)
    backend = hardware.backend
    nvml = backend._nvml
    machine = hardware.machine
    versions = {}
    for name in ("nvidia-ml-py", "gpumix-top", "torch", "nvitop", "textual"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    result: dict[str, Any] = {
        "tool": "nvml_probe",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "source": hardware.source,
        "versions": versions,
        "driver": jsonable(backend.driver_info()),
        "gpus": jsonable(backend.gpus()),
    }
    if machine is not None:
        machine.tick()
    first = backend.sample()
    time.sleep(1.0)
    if machine is not None:
        machine.tick()
    second = backend.sample()
    result["samples"] = [jsonable(first), jsonable(second)]
    result["p2p"] = jsonable(backend.p2p())
    result["p2p_constant_check"] = p2p_constant_check(backend, nvml)
    result["raw_reads_gpu0"] = raw_reads(backend, nvml, 0) if backend.gpus() else {}
    if args.load:
        result["load"] = [under_load(backend, machine, kind, args.load_seconds, args.load_device) for kind in args.load.split(",")]
    result["unsupported"] = {f"{gpu}:{call}": answer for (gpu, call), answer in sorted(backend.unsupported.items())}
    backend.close()
    return result


def text_summary(result: dict[str, Any]) -> str:
    driver = result["driver"]
    lines = [
        f"{result['source']}: driver {driver['driver_version']}, CUDA {driver['cuda_driver_version']}, NVML {driver['nvml_version']}; {result['versions']}",
    ]
    for gpu in result["gpus"]:
        lines.append(
            f"  GPU {gpu['index']} {gpu['name']} ({gpu['brand']}) {gpu['pci_bus_id']} {gpu['mem_total_bytes'] / 2**30 if gpu['mem_total_bytes'] else None:.1f} GiB;"
            f" power limit {gpu['power_limit_min_w']}-{gpu['power_limit_max_w']} W (default {gpu['power_limit_default_w']});"
            f" PCIe max gen {gpu['pcie_gen_max']} (GPU {gpu['pcie_gen_max_gpu']}) x{gpu['pcie_width_max']}"
        )
    for label, samples in zip(("sample 1", "sample 2 (+1 s)"), result["samples"], strict=True):
        for s in samples:
            lines.append(
                f"  {label} GPU {s['index']}: util {s['util_gpu_pct']} % mem {s['mem_used_bytes']} B power {s['power_w']} W"
                f" (cap {s['power_cap_w']}, enforced {s['power_cap_enforced_w']}) {s['temperature_c']} C fan {s['fan_pct']}"
                f" SM {s['clock_sm_mhz']} MHz mem {s['clock_mem_mhz']} MHz reasons {s['clock_event_reasons']}"
                f" link gen{s['pcie_link_gen_current']} x{s['pcie_link_width_current']} rx {s['pcie_rx_bytes_per_s']} tx {s['pcie_tx_bytes_per_s']} B/s"
                f" replays {s['pcie_replay_count']} energy {s['energy_j']} J procs {len(s['processes'])}"
            )
    lines.append(f"  p2p: {result['p2p'] or 'none (fewer than two GPUs)'}")
    lines.append(f"  p2p constants: {result['p2p_constant_check']}")
    lines.append(f"  raw reads GPU 0: {result['raw_reads_gpu0']}")
    for load in result.get("load", []):
        lines.append(
            f"  under {load['kind']}: loader {fmt_rate(load['loader_bytes_per_s_median'])}, gpumix rx {fmt_rate(load['gpumix_rx_bytes_per_s_median'])}"
            f" tx {fmt_rate(load['gpumix_tx_bytes_per_s_median'])}, ratio {load.get('ratio_gpumix_over_copy_rate')}, links {load['links_seen']}"
        )
    lines.append(f"  unsupported: {result['unsupported'] or 'none'}")
    return "\n".join(lines)


def fmt_rate(value: float | None) -> str:
    return "N/A" if value is None else f"{value / 1e9:.2f} GB/s"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["load"]:
        parser = argparse.ArgumentParser(prog="nvml_probe.py load", description="load GPU 0 with torch")
        parser.add_argument("--kind", choices=("h2d", "d2h", "matmul"), default="h2d")
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--report", help="append one JSON line per second (measured copy rate)")
        parser.add_argument("--device", default="cuda:0")
        parser.add_argument("--size-mib", type=int, default=256)
        args = parser.parse_args(argv[1:])
        return run_load(args.kind, args.seconds, args.report, args.device, args.size_mib)
    if argv[:1] == ["counters"]:
        parser = argparse.ArgumentParser(prog="nvml_probe.py counters", description="raw PCIe byte counters under load (real GPU 0)")
        parser.add_argument("--load", default="h2d,d2h")
        parser.add_argument("--seconds", type=float, default=12.0, help="each load runs this long (the reads take ~8 s)")
        parser.add_argument("--load-device", default="cuda:0")
        parser.add_argument("--out", metavar="FILE.json")
        args = parser.parse_args(argv[1:])
        result = counters(args)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(counters_summary(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated demo rig")
    source.add_argument("--sim", metavar="RIG.toml")
    parser.add_argument("--load", default="", help="comma-separated loads to probe under: h2d, d2h, matmul")
    parser.add_argument("--load-seconds", type=float, default=8.0)
    parser.add_argument("--load-device", default="cuda:0")
    parser.add_argument("--out", metavar="FILE.json")
    args = parser.parse_args(argv)
    from gpumix.hw.types import NoDriverError

    try:
        result = probe(args)
    except NoDriverError as error:
        print(f"nvml_probe: {error}; try --demo", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(text_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
