"""A hub on a simulated rig whose GPUs idle as one real H200 did: for the dashboard's bytes at idle.

`gpumix hub --sim RIG` runs a synthetic training job on every GPU (busy). This one turns it off and
replays, one per second and in a loop, the PCIe rates an idle H200's byte counters read
(benchmarks/results/sampling_idle_h200_2026-12-01.json: TX 340-370 KB/s, RX 30-60 KB/s, a tick of
0.33-0.71 MB/s now and then), so a dashboard sees the same noise the H200 showed (issue 13). The
simulated power and utilization keep their own small jitter at idle.

    python benchmarks/idle_sim_hub.py --sim benchmarks/rig_1gpu.toml --socket /tmp/idle.sock
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDLE_H200 = ROOT / "benchmarks/results/sampling_idle_h200_2026-12-01.json"


def idle_rates(path: Path = IDLE_H200) -> list[tuple[float, float]]:
    """(tx, rx) bytes/s of GPU 0, one per tick, as the H200's counters read them."""
    ticks = json.loads(path.read_text())["guard"]["tx_rx_bytes_per_s_by_tick"]
    return [(float(tick[0][0]), float(tick[0][1])) for tick in ticks]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", required=True, help="a rig file or a shipped rig's name")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)

    from gpumix.cli.hardware import is_builtin_rig, simulated_hardware
    from gpumix.cli.node import start_node
    from gpumix.sim.machine import GpuActivity
    from gpumix.sim.rig import load_builtin_rig, load_rig

    rig = load_builtin_rig(args.sim) if is_builtin_rig(args.sim) else load_rig(args.sim)
    hardware = simulated_hardware(rig)
    machine = hardware.machine
    machine.synthetic_job = False  # idle: no job drives the GPUs
    rates = itertools.cycle(idle_rates())

    def tick() -> None:  # before each sampling round: the next interval's housekeeping traffic
        tx, rx = next(rates)
        for index in range(len(machine.gpus)):
            machine.set_activity(index, GpuActivity(pcie_tx_bytes_per_s=tx, pcie_rx_bytes_per_s=rx))

    machine.tick = tick
    node = start_node(hardware, args.socket, interval_s=args.interval)
    print(f"idle hub on {args.socket} ({rig.name}, {len(machine.gpus)} GPUs)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
