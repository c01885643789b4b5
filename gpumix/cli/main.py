"""`gpumix`: the tool CLI for scripts (rigs, topo, power, doctor, plan, run, hub, export, probe).

This module builds the parser and sends each command to its module: `source.py` where power, doctor
and plan read (the running hub, else a hub in this process), `power.py`, `doctor.py`, `plan.py`,
`run_command.py`, `hub_command.py`, `recording.py` (export), `probe.py`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from gpumix import __version__
from gpumix.cli.common import OneLineParser, add_output_flags, add_rig_flags, check_rig_flags, fail

# The hub, NVML, the rigs, the planner and the advisor load inside the commands that use them, and
# `gpumix COMMAND ...` builds only that command's parser: `gpumix doctor` and `gpumix power show` attached
# to a running hub import no other command's module (issue 13: a one-shot's time is mostly importing).
PROG = "gpumix"
# Each command's parser (module, function), in the order `gpumix --help` lists them.
COMMANDS = {
    "rigs": (__name__, "add_rigs_parser"),  # this module, also when run as __main__
    "topo": (__name__, "add_topo_parser"),
    "power": ("gpumix.cli.power", "add_power_parser"),
    "doctor": ("gpumix.cli.doctor", "add_doctor_parser"),
    "plan": ("gpumix.cli.plan", "add_plan_parser"),
    "run": ("gpumix.cli.run_command", "add_run_parser"),
    "hub": ("gpumix.cli.hub_command", "add_hub_parser"),
    "export": ("gpumix.cli.recording", "add_export_parser"),
    "probe": ("gpumix.cli.probe", "add_probe_parser"),
}


def build_parser(only: str | None = None) -> OneLineParser:
    """Every command's parser, or only the one named (what `gpumix COMMAND ...` needs: the same
    usage, help and errors for that command)."""
    parser = OneLineParser(prog=PROG, description="gpumix tools for scripts.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, (module, function) in COMMANDS.items():
        if only is None or name == only:
            getattr(importlib.import_module(module), function)(commands)
    return parser


def add_rigs_parser(commands: argparse._SubParsersAction) -> None:
    commands.add_parser("rigs", help="list the simulated rigs that ship with gpumix")


def add_topo_parser(commands: argparse._SubParsersAction) -> None:
    topo = commands.add_parser("topo", help="P2P status and topology between GPUs (like nvidia-smi topo -m)")
    add_rig_flags(topo)
    add_output_flags(topo)


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
    argv = sys.argv[1:] if argv is None else argv
    refuse_options_before_command(argv, set(COMMANDS))
    parser = build_parser(only=argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    check_rig_flags(parser, args)
    if args.command in ("power", "doctor"):
        from gpumix.cli.source import run_on_source

        if args.command == "doctor":
            from gpumix.cli.doctor import run_doctor

            return run_on_source(args, run_doctor)
        from gpumix.cli.power import check_power_flags, run_power

        check_power_flags(parser, args)
        return run_on_source(args, run_power)
    return run_command(parser, args)


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The commands that are not one-shots: each imports its module when it runs."""
    if args.command == "plan":
        from gpumix.cli.plan import check_plan_flags
        from gpumix.cli.source import plan_command

        check_plan_flags(parser, args)
        return plan_command(args)
    if args.command == "rigs":
        return list_rigs()
    if args.command == "topo":
        return show_topology(args)
    if args.command == "hub":
        from gpumix.cli.hub_command import run_hub

        return run_hub(args)
    if args.command == "export":
        from gpumix.cli.recording import run_export

        return run_export(PROG, args)
    if args.command == "run":
        from gpumix.cli.run_command import run_supervised

        return run_supervised(args)
    if args.command == "probe":
        from gpumix.cli.probe import run_probe

        return run_probe(args)
    return 2


def list_rigs() -> int:
    from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig

    for name in BUILTIN_RIGS:
        rig = load_builtin_rig(name)
        print(f"{name:<18} {len(rig.gpus):>2} GPUs  {rig.description}")
    return 0


def show_topology(args: argparse.Namespace) -> int:
    from gpumix.cli.source import opened_hardware
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
