"""What a one-shot's fresh snapshot costs (issue 13, session 22). A hub no dashboard views carries busy
GPUs' PCIe rates between slow reads; a one-shot's client asks `"fresh": true` and the hub ticks for it
(a 20 ms pair of counter reads on each busy GPU). Against a running hub: each round asks a plain snapshot,
waits, then a fresh one, --gap-s apart (longer than two ticks, so that each fresh ask finds carried
rates), and times each request's wall and the hub's CPU over it (/proc/PID/task/*/schedstat). Reported:
medians of each, and each fresh snapshot's busy GPUs' `pcie_rates_age_s` (0 where the hub read them for
it). Read-only: the hub reads NVML getters only.

    python benchmarks/fresh_snapshot_cost.py --socket HUB.sock --hub-pid PID --rounds 8 --out fresh.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from result_out import report

from gpumix.hub.client import HubClient

sys.path.append(str(Path(__file__).resolve().parents[1]))  # bench_hub's schedstat reader; after the installed packages
from benchmarks.bench_hub import cpu_ns  # noqa: E402


def timed(client: HubClient, hub_pid: int) -> tuple[float, float, dict[str, Any]]:
    """(wall ms, the hub's CPU ms, the snapshot) of one snapshot request."""
    cpu0, wall0 = cpu_ns(hub_pid), time.perf_counter()
    snapshot = client.snapshot() or {}
    wall1, cpu1 = time.perf_counter(), cpu_ns(hub_pid)
    return 1e3 * (wall1 - wall0), (cpu1 - cpu0) / 1e6, snapshot


def busy_ages(snapshot: dict[str, Any]) -> list[float | None]:
    return [gpu.get("pcie_rates_age_s") for gpu in snapshot.get("gpus") or [] if (gpu.get("util_gpu_pct") or 0) > 0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--hub-pid", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--gap-s", type=float, default=2.5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    plain, fresh = HubClient(args.socket), HubClient(args.socket)
    fresh.fresh = True
    rows = []
    for _ in range(args.rounds):
        time.sleep(args.gap_s)
        plain_ms, plain_cpu_ms, plain_snapshot = timed(plain, args.hub_pid)
        time.sleep(args.gap_s)
        fresh_ms, fresh_cpu_ms, fresh_snapshot = timed(fresh, args.hub_pid)
        rows.append({"plain_wall_ms": round(plain_ms, 3), "plain_hub_cpu_ms": round(plain_cpu_ms, 3),
                     "plain_busy_ages_s": busy_ages(plain_snapshot), "fresh_wall_ms": round(fresh_ms, 3),
                     "fresh_hub_cpu_ms": round(fresh_cpu_ms, 3), "fresh_busy_ages_s": busy_ages(fresh_snapshot)})
    plain.close()
    fresh.close()
    medians = {key: statistics.median(row[key] for row in rows)
               for key in ("plain_wall_ms", "plain_hub_cpu_ms", "fresh_wall_ms", "fresh_hub_cpu_ms")}
    result = {"benchmark": "fresh_snapshot_cost", "command": " ".join(["python", *sys.argv]),
              "rounds": args.rounds, "gap_s": args.gap_s, "medians": medians, "rows": rows}
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
