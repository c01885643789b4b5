"""`gpumix`: the tool CLI for scripts (rigs, topo, power, doctor, plan, run, hub, export, probe).

This module builds the parser and sends each command to its module: `source.py` where power, doctor
and plan read (the running hub, else a hub in this process), `power.py`, `doctor.py`, `plan.py`,
`run_command.py`, `hub_command.py`, `recording.py` (export), `probe.py`."""

from __future__ import annotations

import argparse
import json
import sys

from gpumix import __version__
from gpumix.cli.common import OneLineParser, add_output_flags, add_rig_flags, check_rig_flags, fail
from gpumix.cli.doctor import add_doctor_parser
from gpumix.cli.hub_command import add_hub_parser, run_hub
from gpumix.cli.plan import add_plan_parser, check_plan_flags
from gpumix.cli.power import add_power_parser, check_power_flags
from gpumix.cli.probe import add_probe_parser, run_probe
from gpumix.cli.recording import add_export_parser, run_export
from gpumix.cli.run_command import add_run_parser, run_supervised
from gpumix.cli.source import opened_hardware, plan_command, run_on_source

# The hub, NVML, the rigs, the planner and the advisor load inside the commands that use them:
# `gpumix doctor` and `gpumix power show` attached to a running hub read its snapshot through the
# client only (issue 13: importing every command's modules was most of their 0.3 s on the H200).
PROG = "gpumix"


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="gpumix tools for scripts.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    commands.add_parser("rigs", help="list the simulated rigs that ship with gpumix")
    topo = commands.add_parser("topo", help="P2P status and topology between GPUs (like nvidia-smi topo -m)")
    add_rig_flags(topo)
    add_output_flags(topo)
    add_power_parser(commands)
    add_doctor_parser(commands)
    add_plan_parser(commands)
    add_run_parser(commands)
    add_hub_parser(commands)
    add_export_parser(commands)
    add_probe_parser(commands)
    return parser


def refuse_options_before_command(argv: list[str], commands: set[str]) -> None:
    """Each command has its own options: one given before the command is refused, naming where it goes
    (argparse would take its value for the command's name and say something unrelated)."""
    for position, word in enumerate(argv):
        if word in commands:
            return
        if word.startswith("-") and word not in ("-h", "--help", "--version"):
            command = next((later for later in argv[position + 1:] if later in commands), "COMMAND")
            fail(PROG, f"error: {word.split('=')[0]} goes after the command: gpumix {command} {word} ..."
                       " (see --help)")


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers by name (also what the option-position test walks)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    refuse_options_before_command(argv, set(command_parsers(parser)))
    args = parser.parse_args(argv)
    check_rig_flags(parser, args)
    if args.command == "power":
        check_power_flags(parser, args)
    if args.command == "plan":
        check_plan_flags(parser, args)
    if args.command == "rigs":
        return list_rigs()
    if args.command == "hub":
        return run_hub(args)
    if args.command == "export":
        return run_export(PROG, args)
    if args.command == "run":
        return run_supervised(args)
    if args.command == "probe":
        return run_probe(args)
    if args.command == "plan":
        return plan_command(args)
    if args.command == "power":
        from gpumix.cli.power import run_power

        return run_on_source(args, run_power)
    if args.command == "doctor":
        from gpumix.cli.doctor import run_doctor

        return run_on_source(args, run_doctor)
    if args.command == "topo":
        return show_topology(args)
    return 2


def list_rigs() -> int:
    from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig

    for name in BUILTIN_RIGS:
        rig = load_builtin_rig(name)
        print(f"{name:<18} {len(rig.gpus):>2} GPUs  {rig.description}")
    return 0


def show_topology(args: argparse.Namespace) -> int:
    from gpumix.hub import Hub
    from gpumix.hw.topology import topology_text

    hub = Hub(opened_hardware(args))
    snapshot = hub.tick()
    hub.stop()
    if args.json:
        json.dump(snapshot["p2p"], sys.stdout, indent=1)
        print()
    else:
        print(topology_text(snapshot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
