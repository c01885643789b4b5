"""`gpumix-top`: the terminal monitor (or, with --once, one snapshot for scripts)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from gpumix import __version__
from gpumix.cli_common import OneLineParser, fail, positive_float
from gpumix.hub import Hub
from gpumix.hw.open import open_hardware
from gpumix.hw.types import NoDriverError
from gpumix.sim.rig import RigError

PROG = "gpumix-top"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Monitor and tune training on a box of mixed NVIDIA GPUs.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="simulate the 10-GPU mixed rig (3x3060, 4x3090, 3x4090)")
    source.add_argument("--sim", metavar="FILE", help="simulate the rig described in a TOML file")
    parser.add_argument("--interval", type=positive_float, default=1.0, metavar="SECONDS", help="refresh interval (default 1)")
    parser.add_argument("--theme", metavar="NAME", help="gpumix-dark (default), gpumix-light, gpumix-16, or a user theme")
    parser.add_argument("--history-minutes", type=positive_float, default=10.0, metavar="MIN", help="history kept for charts (default 10)")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: the snapshot as JSON")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def text_summary(snapshot: dict[str, Any]) -> str:
    """`--once` without --json: a short table, like `gpustat`."""
    from gpumix.tui import format as fmt  # no textual import needed for this
    from gpumix.tui.gpu_table import link_label

    lines = [f"{snapshot['hostname']}  {snapshot['source']}  driver {snapshot['driver']['driver_version']}"]
    for gpu in snapshot["gpus"]:
        if gpu["lost"]:
            lines.append(f"[{gpu['index']}] {gpu['tier']:<14} LOST")
            continue
        lines.append(
            f"[{gpu['index']}] {gpu['tier']:<14} {fmt.pct(gpu['util_gpu_pct']):>4}"
            f" {fmt.mem_used_total(gpu['mem_used_bytes'], gpu['mem_total_bytes']):>10}"
            f" {fmt.power_draw_cap(gpu['power_w'], gpu['power_cap_w']):>10} {fmt.celsius(gpu['temperature_c']):>4}"
            f" pcie {link_label(gpu):<10} rx {fmt.rate(gpu['pcie_rx_bytes_per_s']):>5}/s tx {fmt.rate(gpu['pcie_tx_bytes_per_s']):>5}/s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.json and not args.once:
        fail(PROG, "--json needs --once (the interactive monitor draws a screen)")
    try:
        hardware = open_hardware(demo=args.demo, sim_file=args.sim)
    except NoDriverError as error:
        fail(PROG, f"{error}. Try `gpumix-top --demo` to see a simulated rig.")
    except RigError as error:
        fail(PROG, str(error))
    hub = Hub(hardware, interval_s=args.interval, history_s=args.history_minutes * 60)
    if args.once:
        return print_once(hub, as_json=args.json)
    from gpumix.tui.app import GpumixApp  # textual loads only for the interactive monitor

    hub.start()
    try:
        GpumixApp(hub, interval_s=args.interval, theme=args.theme).run()
    finally:
        hub.stop()
    return 0


def print_once(hub: Hub, as_json: bool) -> int:
    # Rates (PCIe) are differences of counters: two readings, a short while apart.
    hub.tick()
    time.sleep(min(hub.interval_s, 0.5))
    snapshot = hub.tick()
    hub.stop()
    if as_json:
        json.dump(snapshot, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(text_summary(snapshot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
