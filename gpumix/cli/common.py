"""What both command-line tools share: one-line errors, never a traceback for a user's mistake;
numbers that are finite and in range; flags that mean the same before and after a subcommand."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

EXIT_USAGE = 2

# Upper bounds for numbers a user types: far above any real use, far below what breaks the code.
MAX_INTERVAL_S = 3600.0
MAX_HISTORY_MINUTES = 7 * 24 * 60.0
MAX_RETENTION_MINUTES = 7 * 24 * 60.0
DEFAULT_RETENTION_MINUTES = 10.0
MAX_POWER_W = 100_000.0  # a whole machine's GPUs, many times over
MAX_GLOBAL_BATCH = 10_000_000  # samples per optimizer step
MAX_GRANULARITY = 65_536
MAX_GRADIENT_MB = 10_000_000.0  # 10 TB of gradients


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag prints one line (and where to look), not the usage block."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_USAGE)


def stderr_line(text: str) -> None:
    """One line to stderr in one write, flushed. print writes the text and the newline apart: a signal whose
    handler raises between them (`gpumix power profile`, `gpumix run`) ran the next line into this one."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    stderr_line(f"{prog}: {message}")
    sys.exit(code)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def at_most(kind: Callable[[str], Any], limit: float) -> Callable[[str], Any]:
    """`kind` (positive_float, positive_int), refusing values above `limit` with one line."""

    def parse(text: str) -> Any:
        value = kind(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"must be at most {limit:g}: {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse


def gpu_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a GPU index: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a GPU index is >= 0: {text!r}")
    return value


def add_rig_flags(parser: argparse.ArgumentParser, nested: bool = False, hub: bool = False) -> None:
    """--demo / --sim: look at a simulated rig instead of the real GPUs (and with `hub`, --hub: a running
    hub named, where the default is the running hub if one answers, else the GPUs).

    `nested` adds them to a subcommand of a command that has them too (`gpumix power --demo show`
    and `gpumix power show --demo`): there they default to SUPPRESS, so a subcommand that does not
    repeat a flag never overwrites the value given before it."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated 10-GPU mixed rig and its demo job", **default)
    source.add_argument("--sim", metavar="RIG", help="a simulated rig: a TOML file or a shipped rig's name"
                                                     " (`gpumix rigs`)", **default)
    if hub:
        source.add_argument("--hub", metavar="ADDR", help="a running hub: a socket path or tcp://, tls://HOST:PORT"
                                                          " (default: the running hub, if one answers)", **default)


def add_output_flags(parser: argparse.ArgumentParser, nested: bool = False, dry_run: bool = False) -> None:
    """--json (and --dry-run for commands that change something), nested as add_rig_flags."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    parser.add_argument("--json", action="store_true", help="machine-readable output", **default)
    if dry_run:
        parser.add_argument("--dry-run", action="store_true", help="check and report, change nothing", **default)


def check_rig_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--demo, --sim and --hub may each be given before or after a subcommand, but only one of them."""
    given = [flag for flag, value in (("--demo", getattr(args, "demo", False)), ("--sim", getattr(args, "sim", None)),
                                      ("--hub", getattr(args, "hub", None) if args.command in ("power", "doctor")
                                       else None)) if value]
    if len(given) > 1:
        parser.error(f"argument {given[1]}: not allowed with argument {given[0]}")


def add_retention_flag(parser: argparse.ArgumentParser, own_hub_only: bool = False) -> None:
    parser.add_argument("--retention-minutes", type=at_most(positive_float, MAX_RETENTION_MINUTES), metavar="MIN",
                        help=f"ranks and jobs gone this long leave the live view (default {DEFAULT_RETENTION_MINUTES:g};"
                             " a recording keeps them)" + ("; a hub of its own only" if own_hub_only else ""))


SCENARIOS = ("cpu-forwarding", "data-parallel", "launch-bound", "mixed-precision", "uneven-memory")


def add_scenario_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", choices=SCENARIOS, metavar="NAME",
                        help="with --demo or --sim: show one field finding on purpose (docs/findings.md):"
                             f" {', '.join(SCENARIOS)}")


def check_scenario_flag(prog: str, args: argparse.Namespace) -> None:
    if getattr(args, "scenario", None) and not (args.demo or args.sim):
        fail(prog, "--scenario runs in the simulated world: add --demo or --sim RIG")


def add_power_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--power-config", metavar="FILE",
                        help="the machine's power supplies and wall circuits (TOML, docs/power.md): fits and findings"
                             " respect every one")


def apply_power_config(prog: str, args: argparse.Namespace, hardware: Any) -> None:
    """--power-config FILE into the hardware's layout; one line if the file cannot be used."""
    if not getattr(args, "power_config", None):
        return
    from gpumix.power.supplies import LayoutError, load_layout

    try:
        hardware.power_layout = load_layout(args.power_config, len(hardware.backend.gpus())).to_json()
    except LayoutError as error:
        fail(prog, str(error))
