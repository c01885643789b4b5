"""Are a busy GPU's PCIe rates right when no dashboard views the hub (issue 13, session 21)? Each second,
GPU 0's RX and TX in a running hub's snapshot (asked without "view" for --unviewed-s, then with it for
--viewed-s), beside NVML's own 20 ms window read here in raw pynvml (none of gpumix's code): with no
viewer the hub carries a rate between its reads (every 5 s; since session 22 up to 30 s apart while the
same processes work), so its rates should stay within the window's
spread and never show a counter step aliased by wraps. Run it while the GPU moves data (gpu_load.py);
read-only: NVML getters only.

    python benchmarks/unviewed_rates_check.py --socket HUB.sock --unviewed-s 20 --viewed-s 10 --out rates.json
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


def window_rates(handle: Any) -> tuple[float, float]:
    import pynvml

    tx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1000.0
    rx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1000.0
    return tx, rx


def poll(client: HubClient, handle: Any, seconds: float) -> list[dict[str, Any]]:
    rows, ends = [], time.monotonic() + seconds
    while time.monotonic() < ends:
        snapshot = client.snapshot() or {}
        gpu = (snapshot.get("gpus") or [{}])[0]
        window_tx, window_rx = window_rates(handle)
        rows.append({"hub_timestamp_s": snapshot.get("timestamp_s"), "hub_rx_bytes_per_s": gpu.get("pcie_rx_bytes_per_s"),
                     "hub_tx_bytes_per_s": gpu.get("pcie_tx_bytes_per_s"), "window_rx_bytes_per_s": window_rx,
                     "window_tx_bytes_per_s": window_tx})
        time.sleep(1.0)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def spread(key: str) -> dict[str, float | None]:
        values = [row[key] for row in rows if isinstance(row[key], int | float)]
        if not values:
            return {"median": None, "min": None, "max": None}
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return {"polls": len(rows), "distinct_hub_rx": len({row["hub_rx_bytes_per_s"] for row in rows}),
            **{key: spread(key) for key in ("hub_rx_bytes_per_s", "window_rx_bytes_per_s",
                                            "hub_tx_bytes_per_s", "window_tx_bytes_per_s")}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--unviewed-s", type=float, default=20.0)
    parser.add_argument("--viewed-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    client = HubClient(args.socket)
    unviewed = poll(client, handle, args.unviewed_s)
    client.viewing = True
    viewed = poll(client, handle, args.viewed_s)
    client.close()
    pynvml.nvmlShutdown()
    result = {"benchmark": "unviewed_rates_check", "command": " ".join(["python", *sys.argv]),
              "unviewed": summary(unviewed), "viewed": summary(viewed),
              "unviewed_polls": unviewed, "viewed_polls": viewed}
    return report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
