"""`gpumix probe`: measure what each link delivers, whether P2P copies are correct, and the all-reduce
floor (gpumix.probe); print it, keep it per machine, or show the kept result with its age. It runs
only when asked: never from the hub by itself."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpumix.cli.common import at_most, fail, positive_float, positive_int

PROG = "gpumix probe"
MAX_MEMORY_MIB = 64 * 1024
MAX_TIME_LIMIT_S = 600.0
MAX_GPUS_LISTED = 1024


def gpu_list(text: str) -> list[int]:
    try:
        indices = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU numbers like 0,2: {text!r}") from None
    if not indices or len(indices) > MAX_GPUS_LISTED or min(indices) < 0 or max(indices) >= MAX_GPUS_LISTED:
        raise argparse.ArgumentTypeError(f"not a list of GPU numbers like 0,2: {text!r}")
    return indices


def add_probe_parser(commands: Any) -> None:
    probe = commands.add_parser(
        "probe", help="measure each link's bandwidth, P2P correctness and the all-reduce floor (needs torch)")
    probe.add_argument("--json", action="store_true", help="machine-readable output")
    probe.add_argument("--gpus", type=gpu_list, metavar="LIST", help="probe only these GPUs (e.g. 0,2)")
    probe.add_argument("--force", action="store_true", help="probe GPUs another process is busy on")
    probe.add_argument("--max-memory-mib", type=at_most(positive_int, MAX_MEMORY_MIB), default=1024, metavar="MIB",
                       help="GPU memory the probe may use per GPU (default 1024)")
    probe.add_argument("--time-limit", type=at_most(positive_float, MAX_TIME_LIMIT_S), default=30.0,
                       metavar="SECONDS", help="the whole probe's time (default 30)")
    probe.add_argument("--allreduce-mib", type=at_most(positive_float, MAX_MEMORY_MIB), metavar="MIB",
                       help="all-reduce size (default: the running job's gradient size when a hub says it, else 256)")
    probe.add_argument("--no-allreduce", action="store_true", help="leave out the NCCL all-reduce floor")
    probe.add_argument("--show", action="store_true", help="show the kept result for this machine and its age;"
                                                           " measure nothing")


def run_probe(args: argparse.Namespace) -> int:
    from gpumix.hw.nvml_backend import NvmlBackend
    from gpumix.hw.types import NoDriverError
    from gpumix.probe import store
    from gpumix.probe.cuda import NoCudaError, TorchCuda
    from gpumix.probe.measure import MIB
    from gpumix.probe.probe import Nvml, ProbeOptions, exit_code, machine_of
    from gpumix.probe.probe import run_probe as probe

    try:
        nvml = Nvml(NvmlBackend())
    except NoDriverError as error:
        fail(PROG, str(error))
    try:
        if args.show:
            kept = store.load(machine_of(nvml))
            if kept is None:
                fail(PROG, "no probe result is kept for this machine (GPUs, driver and slots as they are now):"
                           " run gpumix probe", code=1)
            print_report(kept, args.json)
            return exit_code(kept)
        max_bytes = args.max_memory_mib * MIB
        wanted_bytes = args.allreduce_mib * MIB if args.allreduce_mib else gradient_bytes_from_hub()
        options = ProbeOptions(gpus=args.gpus, force=args.force, max_bytes_per_gpu=max_bytes,
                               time_limit_s=args.time_limit, allreduce=not args.no_allreduce,
                               allreduce_bytes=int(min(wanted_bytes or 256 * MIB, max_bytes // 2)))
        try:
            report = probe(nvml, TorchCuda, options, say=lambda line: print(plain(line), file=sys.stderr, flush=True))
        except NoCudaError as error:
            fail(PROG, str(error))
        except KeyboardInterrupt:
            fail(PROG, "interrupted: nothing kept", code=130)
        except RuntimeError as error:  # CUDA failing mid-way: one line, nothing kept
            fail(PROG, f"CUDA failed: {plain(str(error).splitlines()[0] if str(error) else error)}", code=1)
        if report["gpus"]:
            try:
                path = store.save(report)
                print(f"{PROG}: kept in {path}", file=sys.stderr, flush=True)
            except OSError as error:
                print(f"{PROG}: not kept: {error}", file=sys.stderr, flush=True)
        print_report({**report, "age_s": 0.0, "stale": False}, args.json)
        return exit_code(report)
    finally:
        nvml.backend.close()


def gradient_bytes_from_hub() -> float | None:
    """The running job's gradient size, when the hub on this node answers and a rank reported it."""
    import statistics

    from gpumix.hub.client import HubClient
    from gpumix.wire.paths import default_hub_address, hub_answers

    address = default_hub_address()
    if address.startswith(("tcp://", "tls://")) or not hub_answers(address):
        return None
    client = HubClient(address, readonly=True)
    try:
        snapshot = client.snapshot()
    finally:
        client.close()
    ranks = snapshot.get("ranks") if isinstance(snapshot, dict) else None
    sizes = [r["gradient_bytes"] for r in (ranks if isinstance(ranks, list) else []) if isinstance(r, dict)
             and isinstance(r.get("gradient_bytes"), (int, float)) and 0 < r["gradient_bytes"] < 1e13]
    if sizes:
        print(f"{PROG}: all-reduce at the running job's gradient size ({statistics.median(sizes) / 1e6:.0f} MB)",
              file=sys.stderr, flush=True)
    return statistics.median(sizes) if sizes else None


def plain(value: Any, max_chars: int = 300) -> str:
    """Text from NVML, CUDA or a kept file as printed: one line, control characters escaped."""
    text = str(value)[:max_chars]
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def gb(value: Any) -> str:
    return f"{value / 1e9:.1f} GB/s" if isinstance(value, (int, float)) else "N/A"


def print_report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    age_s = report.get("age_s") or 0.0
    driver = plain(report.get("machine", {}).get("driver_version"))
    print(f"probe of {len(report.get('gpus', []))} GPU(s), driver {driver}"
          + (f", measured {age_s / 3600:.1f} h ago" if age_s > 60 else "")
          + (" (stale: run gpumix probe again)" if report.get("stale") else ""))
    for gpu in report.get("gpus", []):
        print(f"GPU {gpu['gpu']} {plain(gpu.get('name'))}: PCIe {plain(gpu.get('link_now'))} (max"
              f" {plain(gpu.get('link_max'))}), pinned h2d {gb(gpu.get('best_h2d_bytes_per_s'))},"
              f" d2h {gb(gpu.get('best_d2h_bytes_per_s'))}, expected {gb(gpu.get('expected_bytes_per_s'))}")
        for copy in gpu.get("copies", []):
            print(f"  {copy['direction']} {copy['memory']:<8} {copy['size_bytes'] // 2**20:>4} MiB"
                  f"  {gb(copy['bytes_per_s'])}")
        for note in gpu.get("notes", []):
            print(f"  {plain(note)}")
    together = report.get("together") or {}
    if together.get("aggregate_bytes_per_s"):
        print(f"all at once: {gb(together['aggregate_bytes_per_s'])} of"
              f" {gb(together['sum_of_singles_bytes_per_s'])} summed")
    for pair in report.get("pairs", []):
        for d in pair.get("directions", []):
            checks = "correct" if all(c["correct"] for c in d["checks"].values()) else "WRONG"
            print(f"GPU {d['from']} -> GPU {d['to']} via {d['route']}: {gb(d['bytes_per_s'])},"
                  f" {d['latency_s'] * 1e6:.1f} us, copies {checks}")
    floor = report.get("allreduce") or {}
    if floor.get("skipped"):
        print(f"all-reduce floor: skipped ({plain(floor['skipped'])})")
    for run in floor.get("runs", []):
        label = "NCCL_P2P_DISABLE=1" if run.get("p2p_disabled") else "P2P allowed"
        via = ", ".join(plain(t) for t in run.get("transports", [])) or "?"
        outcome = plain(run["error"]) if run.get("error") else f"bus {gb(run.get('bus_bytes_per_s'))}"
        print(f"all-reduce {run.get('size_bytes', 0) / 1e6:.0f} MB, {label}: {outcome} via {via}")
    for refused in report.get("refused", []):
        print(f"GPU {refused['gpu']} not probed: {plain(refused['reason'])}")
    for finding in report.get("findings", []):
        print(f"{finding['severity']}: {plain(finding['message'])}. Fix: {plain(finding['fix'])}")
