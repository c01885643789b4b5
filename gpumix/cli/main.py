"""`gpumix`: the tool CLI for scripts (rigs, topo, power, doctor, plan, run, hub, export)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumix import __version__
from gpumix.cli.common import (
    DEFAULT_RETENTION_MINUTES,
    MAX_GRANULARITY,
    MAX_HISTORY_MINUTES,
    MAX_INTERVAL_S,
    MAX_POWER_W,
    OneLineParser,
    add_output_flags,
    add_power_config_flag,
    add_retention_flag,
    add_rig_flags,
    add_scenario_flag,
    apply_power_config,
    at_most,
    check_rig_flags,
    check_scenario_flag,
    fail,
    non_negative_float,
    positive_float,
    positive_int,
)
from gpumix.cli.plan import add_plan_parser, check_plan_flags
from gpumix.cli.power import add_power_parser, check_power_flags
from gpumix.cli.probe import add_probe_parser, run_probe
from gpumix.cli.recording import (
    add_export_parser,
    add_prometheus_flags,
    add_record_flags,
    check_prometheus,
    resolve_record_flags,
    run_export,
    start_prometheus,
    start_recording,
)
from gpumix.cli.remote import (
    access_settings,
    add_access_flags,
    add_tcp_flags,
    tcp_settings,
    unix_socket_path,
)
from gpumix.hub.client import HubClient
from gpumix.hub.connections import hub_answers
from gpumix.wire import auth
from gpumix.wire.paths import default_hub_address

# The hub, NVML, the rigs, the planner and the advisor load inside the commands that use them:
# `gpumix doctor` and `gpumix power show` attached to a running hub read its snapshot through the
# client only (issue 13: importing every command's modules was most of their 0.3 s on the H200).
if TYPE_CHECKING:
    from gpumix.hw.hardware import Hardware

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
    doctor = commands.add_parser("doctor", help="findings about this box: exit 0 healthy, 1 warnings, 2 errors")
    add_rig_flags(doctor, hub=True)
    add_output_flags(doctor)
    doctor.add_argument("--power-budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                        help="the machine's GPU power budget")
    doctor.add_argument("--min-4090-p2p-driver", metavar="VERSION",
                        help="drivers before this one are suspect for RTX 4090 P2P (default 525.60.11;"
                             " also GPUMIX_4090_P2P_MIN_DRIVER)")
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


def add_run_parser(commands: Any) -> None:
    run = commands.add_parser("run", help="supervise a training job; restart it under a new plan on request",
                              usage="gpumix run [--job NAME] [--plan FILE] [--hub PATH] [--granularity N]"
                                    " [--auto-replan] -- COMMAND ...")
    run.add_argument("--job", help="the job's name (default: the script's name)")
    run.add_argument("--plan", metavar="FILE", help="start with this plan (JSON from `gpumix plan --json`)")
    run.add_argument("--hub", metavar="PATH", help="the hub's socket (default: $GPUMIX_HUB or the runtime dir)")
    run.add_argument("--granularity", type=at_most(positive_int, MAX_GRANULARITY), default=1, metavar="N",
                     help="re-plans give each rank a multiple of N samples (e.g. 64: GPUs compute whole tiles)")
    run.add_argument("--auto-replan", action="store_true",
                     help="re-plan and restart by itself when a split is predicted faster (never leaves ranks out)")
    run.add_argument("--auto-replan-min-speedup", type=at_most(positive_float, 100.0), default=1.05, metavar="X",
                     help="the predicted speedup an automatic re-plan needs (default 1.05)")
    run.add_argument("--auto-replan-max", type=at_most(positive_int, 1000), default=3, metavar="N",
                     help="automatic re-plans at most (default 3)")
    run.add_argument("--kill-grace", type=at_most(non_negative_float, 3600.0), default=10.0, metavar="SECONDS",
                     help="on stop, SIGTERM the job's processes, then SIGKILL them after this long (default 10;"
                          " a second Ctrl+C kills at once)")
    run.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND")


def add_hub_parser(commands: Any) -> None:
    hub = commands.add_parser("hub", help="run this node's hub headless (history survives a closed TUI)")
    add_rig_flags(hub)
    hub.add_argument("--socket", metavar="PATH",
                     help="Unix socket to listen on (default: $GPUMIX_HUB or the runtime dir)")
    hub.add_argument("--interval", type=at_most(positive_float, MAX_INTERVAL_S), default=1.0, metavar="SECONDS",
                     help="sampling interval (default 1)")
    hub.add_argument("--history-minutes", type=at_most(positive_float, MAX_HISTORY_MINUTES), default=60.0,
                     metavar="MIN", help="history kept for charts (default 60)")
    hub.add_argument("--power-budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                     help="the machine's GPU power budget")
    add_retention_flag(hub)
    add_scenario_flag(hub)
    add_power_config_flag(hub)
    add_tcp_flags(hub)
    add_access_flags(hub)
    add_record_flags(hub)
    add_prometheus_flags(hub)


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
        from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig

        for name in BUILTIN_RIGS:
            rig = load_builtin_rig(name)
            print(f"{name:<18} {len(rig.gpus):>2} GPUs  {rig.description}")
        return 0
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
    if args.command in ("power", "doctor"):
        from gpumix.cli.power import run_doctor, run_power

        return run_on_source(args, run_power if args.command == "power" else run_doctor)
    if args.command == "topo":
        from gpumix.hub import Hub
        from gpumix.hw.topology import topology_text

        hardware = opened_hardware(args)

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


def run_on_source(args: argparse.Namespace, run: Callable[..., int]) -> int:
    """power and doctor read (and act) where the TUI would: the running hub when there is one or --hub
    names it, else the GPUs or the rig named, through a hub in this process. An implicit choice is said
    on stderr in one line."""
    address = args.hub or (None if args.demo or args.sim else default_hub_address())
    if address is not None and (args.hub or (not auth.is_tcp(address) and hub_answers(address))):
        if not args.hub:
            print(f"{PROG}: using the running hub at {address}", file=sys.stderr, flush=True)
        client = HubClient(address, token=read_token_for(address))
        try:
            return run(args, client)
        finally:
            client.close()
    from gpumix.cli.power import local_source

    hardware = opened_hardware(args)
    if not args.demo and not args.sim:
        print(f"{PROG}: no hub is running: reading the GPUs through NVML", file=sys.stderr, flush=True)
    if args.demo:
        return with_demo_job(args, hardware, run)
    hub = local_source(hardware, settle_s=0.5 if args.command == "doctor" else 0.0)
    try:
        return run(args, hub)
    finally:
        hub.stop()


def opened_hardware(args: argparse.Namespace) -> Hardware:
    """The GPUs, or the rig --demo or --sim names; a missing driver or a bad rig is one line."""
    from gpumix.cli.hardware import open_hardware
    from gpumix.hw.types import NoDriverError
    from gpumix.sim.rig import RigError

    try:
        return open_hardware(demo=args.demo, sim_file=args.sim)
    except (NoDriverError, RigError) as error:
        fail(PROG, str(error))


def read_token_for(address: str) -> str | None:
    if not auth.is_tcp(address):
        return None
    try:
        return auth.read_token()
    except auth.TokenError as error:
        fail(PROG, f"cannot use the token: {error}")


def with_demo_job(args: argparse.Namespace, hardware: Hardware, run: Callable[..., int]) -> int:
    """`--demo` looks at the demo rig while its demo job runs, as a user would see it."""
    from gpumix.cli.node import demo_socket_path, start_node

    node = start_node(hardware, demo_socket_path(), demo=True, sample_in_thread=True)
    try:
        node.wait_for_ranks(len(hardware.backend.gpus()), timeout_s=10.0)
        time.sleep(node.hub.interval_s)  # one more hardware tick with the job running
        node.hub.tick()
        return run(args, node.hub)
    finally:
        node.stop()


def plan_command(args: argparse.Namespace) -> int:
    from gpumix.cli.plan import run_plan_command, wait_for_steps

    if not args.demo:
        return run_plan_command(args, HubClient(args.hub or default_hub_address()))
    from gpumix.cli.hardware import open_hardware
    from gpumix.cli.node import demo_socket_path, start_node

    node = start_node(open_hardware(demo=True), demo_socket_path(), demo=True)
    try:
        wait_for_steps(node.hub, steps=5, timeout_s=20.0)
        code = run_plan_command(args, node.hub)
        if args.apply and code == 0:  # show the restart happen, as the TUI would
            wait_for_restart(node.hub, "demo", timeout_s=30.0)
        return code
    finally:
        node.stop()


def wait_for_restart(hub: object, job: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = (hub.snapshot() or {}).get("jobs", {}).get(job, {})
        if status.get("restarts"):
            print(f"restarted: {status.get('message')}")
            return
        time.sleep(0.2)
    print("the restart did not finish in time")


def run_supervised(args: argparse.Namespace) -> int:
    from gpumix.run.auto_replan import AutoReplan
    from gpumix.run.supervisor import Supervisor
    from gpumix.wire.plan_file import load_plan

    command = args.job_command[1:] if args.job_command[:1] == ["--"] else args.job_command
    if not command:
        fail(PROG, "run needs a command after --, e.g. gpumix run -- torchrun --nproc_per_node=2 train.py")
    try:
        plan = load_plan(args.plan) if args.plan else None
    except (ValueError, KeyError, TypeError) as error:
        fail(PROG, f"{args.plan}: not a usable plan: {error}")
    job = args.job or Path(next((part for part in reversed(command) if part.endswith(".py")), command[0])).stem
    supervisor = Supervisor(command, job, hub=args.hub or default_hub_address(), plan=plan,
                            say=lambda line: print(line, file=sys.stderr, flush=True), granularity=args.granularity,
                            auto_replan=AutoReplan(args.auto_replan_min_speedup, args.auto_replan_max)
                            if args.auto_replan else None, kill_grace_s=args.kill_grace)
    signal.signal(signal.SIGINT, lambda *_: supervisor.stop())
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stop())
    try:
        return supervisor.run()
    except FileNotFoundError as error:
        fail(PROG, f"cannot start the job: {error.strerror}: {error.filename}")


def run_hub(args: argparse.Namespace) -> int:
    from gpumix.cli.logs import log_to_stderr_in_background
    from gpumix.cli.node import start_node
    from gpumix.hub.server import HubAlreadyRunning

    metrics_address = check_prometheus(PROG, args)
    check_scenario_flag(PROG, args)
    resolve_record_flags(PROG, args)
    tcp, token, tls = tcp_settings(PROG, args)
    access = access_settings(PROG, args)
    hardware = opened_hardware(args)
    if args.power_budget:
        hardware.power_budget_w = args.power_budget
    apply_power_config(PROG, args, hardware)
    try:
        socket_path = args.socket or unix_socket_path(default_hub_address())
        node = start_node(hardware, socket_path, interval_s=args.interval,
                          history_s=args.history_minutes * 60, demo=args.demo, tcp=tcp, token=token, tls=tls,
                          access=access, scenario=args.scenario,
                          rank_retention_s=60 * (args.retention_minutes or DEFAULT_RETENTION_MINUTES))
    except (HubAlreadyRunning, OSError, ValueError) as error:  # ValueError: an unusable --scenario
        fail(PROG, f"cannot start a hub: {error}")
    recorder = metrics = None
    try:
        recorder = start_recording(PROG, args, node.hub)
        metrics = start_prometheus(PROG, metrics_address, node.hub)
    except SystemExit:
        node.stop()
        raise
    logs = log_to_stderr_in_background()
    stop = threading.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signal_number, lambda *_: stop.set())
    if node.server is not None and node.server.tcp_url is not None:  # tls:// for a TLS hub
        socket_path = f"{socket_path} and {node.server.tcp_url}"
    print(f"gpumix hub: listening on {socket_path} ({hardware.source}, {len(hardware.backend.gpus())} GPUs);"
          " attach with gpumix-top, stop with Ctrl+C", flush=True)
    try:
        stop.wait()
    finally:
        if metrics is not None:
            metrics.stop()
        node.stop()
        if recorder is not None:
            recorder.close()  # after the hub: its last tick is in the file
        logs.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
