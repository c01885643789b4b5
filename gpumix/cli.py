"""`gpumix`: the tool CLI for scripts (rigs, topology; later doctor, power, plan, run, hub)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from gpumix import __version__
from gpumix.cli_common import OneLineParser, fail, positive_float
from gpumix.hw.open import open_hardware
from gpumix.hw.types import NoDriverError
from gpumix.paths import default_hub_address
from gpumix.sim.rig import BUILTIN_RIGS, RigError, load_builtin_rig
from gpumix.topology import topology_text

PROG = "gpumix"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="gpumix tools for scripts.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    commands.add_parser("rigs", help="list the simulated rigs that ship with gpumix")
    topo = commands.add_parser("topo", help="P2P status and topology between GPUs (like nvidia-smi topo -m)")
    source = topo.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true")
    source.add_argument("--sim", metavar="FILE")
    topo.add_argument("--json", action="store_true")
    hub = commands.add_parser("hub", help="run this node's hub headless (history survives a closed TUI)")
    source = hub.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated 10-GPU rig and its demo job")
    source.add_argument("--sim", metavar="FILE")
    hub.add_argument("--socket", metavar="PATH", help="Unix socket to listen on (default: $GPUMIX_HUB or the runtime dir)")
    hub.add_argument("--interval", type=positive_float, default=1.0, metavar="SECONDS")
    hub.add_argument("--history-minutes", type=positive_float, default=60.0, metavar="MIN")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "rigs":
        for name in BUILTIN_RIGS:
            rig = load_builtin_rig(name)
            print(f"{name:<18} {len(rig.gpus):>2} GPUs  {rig.description}")
        return 0
    if args.command == "hub":
        return run_hub(args)
    if args.command == "topo":
        try:
            hardware = open_hardware(demo=args.demo, sim_file=args.sim)
        except (NoDriverError, RigError) as error:
            fail(PROG, str(error))
        from gpumix.hub import Hub

        hub = Hub(hardware)
        snapshot = hub.tick()
        hub.stop()
        if args.json:
            json.dump(snapshot["p2p"], sys.stdout, indent=1)
            print()
        else:
            print(topology_text(snapshot))
        return 0
    return 2


def run_hub(args: argparse.Namespace) -> int:
    from gpumix.hub.node import start_node
    from gpumix.hub.server import HubAlreadyRunning

    try:
        hardware = open_hardware(demo=args.demo, sim_file=args.sim)
    except (NoDriverError, RigError) as error:
        fail(PROG, str(error))
    try:
        socket_path = args.socket or default_hub_address()
        node = start_node(hardware, socket_path, interval_s=args.interval,
                          history_s=args.history_minutes * 60, demo=args.demo)
    except (HubAlreadyRunning, OSError) as error:
        fail(PROG, f"cannot start a hub: {error}")
    stop = threading.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signal_number, lambda *_: stop.set())
    print(f"gpumix hub: listening on {socket_path} ({hardware.source}, {len(hardware.backend.gpus())} GPUs);"
          " attach with gpumix-top, stop with Ctrl+C", flush=True)
    try:
        stop.wait()
    finally:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
