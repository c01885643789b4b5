"""`gpumix`: the tool CLI for scripts (rigs, topology; later doctor, power, plan, run, hub)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable

from gpumix import __version__
from gpumix.cli_common import OneLineParser, fail, positive_float
from gpumix.cli_power import add_power_parser, run_doctor, run_power
from gpumix.hw.open import Hardware, open_hardware
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
    source_flags = OneLineParser(add_help=False)
    source = source_flags.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated 10-GPU mixed rig")
    source.add_argument("--sim", metavar="FILE", help="a simulated rig file")
    source_flags.add_argument("--json", action="store_true")
    source_flags.add_argument("--dry-run", action="store_true", help="check and report, change nothing")
    add_power_parser(commands, source_flags)
    doctor = commands.add_parser("doctor", help="findings about this box: exit 0 healthy, 1 warnings, 2 errors")
    source = doctor.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true")
    source.add_argument("--sim", metavar="FILE")
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument("--power-budget", type=positive_float, metavar="WATTS", help="the machine's GPU power budget")
    doctor.add_argument("--min-4090-p2p-driver", metavar="VERSION",
                        help="drivers before this one are suspect for RTX 4090 P2P (default 525.60.11;"
                             " also GPUMIX_4090_P2P_MIN_DRIVER)")
    hub = commands.add_parser("hub", help="run this node's hub headless (history survives a closed TUI)")
    source = hub.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated 10-GPU rig and its demo job")
    source.add_argument("--sim", metavar="FILE")
    hub.add_argument("--socket", metavar="PATH", help="Unix socket to listen on (default: $GPUMIX_HUB or the runtime dir)")
    hub.add_argument("--interval", type=positive_float, default=1.0, metavar="SECONDS")
    hub.add_argument("--history-minutes", type=positive_float, default=60.0, metavar="MIN")
    hub.add_argument("--power-budget", type=positive_float, metavar="WATTS", help="the machine's GPU power budget")
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
    if args.command in ("power", "doctor"):
        try:
            hardware = open_hardware(demo=args.demo, sim_file=args.sim)
        except (NoDriverError, RigError) as error:
            fail(PROG, str(error))
        run = run_power if args.command == "power" else run_doctor
        if args.demo:
            return with_demo_job(args, hardware, run)
        return run(args, hardware)
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


def with_demo_job(args: argparse.Namespace, hardware: Hardware, run: Callable[..., int]) -> int:
    """`--demo` looks at the demo rig while its demo job runs, as a user would see it."""
    from gpumix.hub.node import demo_socket_path, start_node

    node = start_node(hardware, demo_socket_path(), demo=True, sample_in_thread=True)
    try:
        node.wait_for_ranks(len(hardware.backend.gpus()), timeout_s=10.0)
        time.sleep(node.hub.interval_s)  # one more hardware tick with the job running
        return run(args, hardware, hub=node.hub)
    finally:
        node.stop()


def run_hub(args: argparse.Namespace) -> int:
    from gpumix.hub.node import start_node
    from gpumix.hub.server import HubAlreadyRunning

    try:
        hardware = open_hardware(demo=args.demo, sim_file=args.sim)
    except (NoDriverError, RigError) as error:
        fail(PROG, str(error))
    if args.power_budget:
        hardware.power_budget_w = args.power_budget
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
