"""A pair of PCIe counter reads 20 ms apart against nvmlDeviceGetPcieThroughput's 20 ms window, on a real
GPU (issue 13, session 11): do the counters' timestamps move within 20 ms, do the two methods agree, and
what does each cost in process CPU. Raw pynvml only (none of gpumix's code: the window is NVML's own
method, the other side of the comparison). Run it while the GPU moves data (benchmarks/gpu_load.py);
read-only: NVML getters only.

    python benchmarks/pcie_pair_check.py --rounds 20 --out pcie_pair_check.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

TX, RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES / RX_BYTES


def _value(field) -> tuple[int, int]:  # (raw, modulus) by the declared type
    import pynvml

    if field.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(field.value.uiVal), 1 << 32
    return int(field.value.ullVal), 1 << 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gap-s", type=float, default=0.02)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    rounds = []
    for _ in range(args.rounds):
        started = time.process_time()
        first = pynvml.nvmlDeviceGetFieldValues(handle, [TX, RX])
        first_cpu = time.process_time() - started
        time.sleep(args.gap_s)
        started = time.process_time()
        second = pynvml.nvmlDeviceGetFieldValues(handle, [TX, RX])
        pair_cpu = first_cpu + time.process_time() - started
        gap_us = int(second[0].timestamp) - int(first[0].timestamp)
        rates = []
        for slot in (0, 1):
            raw_a, modulus = _value(first[slot])
            raw_b, _ = _value(second[slot])
            rates.append((raw_b - raw_a) % modulus / (gap_us / 1e6) if gap_us > 0 else None)
        started = time.process_time()
        window_tx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES) * 1000.0
        window_rx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES) * 1000.0
        window_cpu = time.process_time() - started
        rounds.append({"pair_gap_us": gap_us, "pair_tx_bytes_per_s": rates[0], "pair_rx_bytes_per_s": rates[1],
                       "window_tx_bytes_per_s": window_tx, "window_rx_bytes_per_s": window_rx,
                       "pair_cpu_us": pair_cpu * 1e6, "window_cpu_us": window_cpu * 1e6,
                       "value_type": int(first[0].valueType)})
        time.sleep(0.2)
    pynvml.nvmlShutdown()
    moved = [r for r in rounds if r["pair_gap_us"] > 0]

    def median(key: str, rows: list[dict]) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else None

    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "rounds": args.rounds,
              "gap_s": args.gap_s, "pairs_with_a_newer_timestamp": len(moved),
              "median_pair_gap_us": median("pair_gap_us", rounds),
              "median_pair_rx_bytes_per_s": median("pair_rx_bytes_per_s", moved),
              "median_window_rx_bytes_per_s": median("window_rx_bytes_per_s", rounds),
              "median_pair_tx_bytes_per_s": median("pair_tx_bytes_per_s", moved),
              "median_window_tx_bytes_per_s": median("window_tx_bytes_per_s", rounds),
              "median_pair_cpu_us": median("pair_cpu_us", rounds), "median_window_cpu_us": median("window_cpu_us", rounds),
              "rounds_detail": rounds}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
