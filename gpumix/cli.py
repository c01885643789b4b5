"""`gpumix`: the tool CLI for scripts (rigs, topology; later doctor, power, plan, run, hub)."""

from __future__ import annotations

import json
import sys

from gpumix import __version__
from gpumix.cli_common import OneLineParser, fail
from gpumix.hw.open import open_hardware
from gpumix.hw.types import NoDriverError
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "rigs":
        for name in BUILTIN_RIGS:
            rig = load_builtin_rig(name)
            print(f"{name:<18} {len(rig.gpus):>2} GPUs  {rig.description}")
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
