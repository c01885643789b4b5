"""`gpumix-top`: the terminal monitor (or, with --once, one snapshot for scripts)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from gpumix import __version__
from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl
from gpumix.cli.common import (
    DEFAULT_RETENTION_MINUTES,
    MAX_HISTORY_MINUTES,
    MAX_INTERVAL_S,
    MAX_POWER_W,
    OneLineParser,
    add_power_config_flag,
    add_retention_flag,
    add_scenario_flag,
    apply_power_config,
    at_most,
    check_scenario_flag,
    fail,
    positive_float,
)
from gpumix.cli.docstring_free import forget_reexec, reexec_without_docstrings
from gpumix.cli.recording import add_record_flags, resolve_record_flags, start_recording
from gpumix.hub.client import HubClient
from gpumix.tui.remote import add_hub_flags, failure_reason, open_source, print_snapshot
from gpumix.wire import auth

if TYPE_CHECKING:
    from gpumix.cli.node import Node

PROG = "gpumix-top"
DEFAULT_HISTORY_MINUTES = 10.0
# Flags that set up the hub gpumix-top starts for itself: refused where it starts none (--hub, an already
# running hub, --replay) rather than dropped. (dest, flag)
OWN_HUB_FLAGS = (("power_budget", "--power-budget"), ("power_config", "--power-config"), ("history_minutes", "--history-minutes"),
                 ("retention_minutes", "--retention-minutes"),
                 ("record", "--record"), ("record_max_size", "--record-max-size"))


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description="Monitor and tune training on a box of mixed NVIDIA GPUs.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="simulate the 10-GPU mixed rig (3x3060, 4x3090, 3x4090)")
    source.add_argument("--sim", metavar="FILE", help="simulate the rig described in a TOML file")
    source.add_argument("--replay", metavar="FILE", help="replay a recording (P pause, [ ] seek, + - speed); read-only")
    parser.add_argument("--interval", type=at_most(positive_float, MAX_INTERVAL_S), default=1.0, metavar="SECONDS",
                        help="refresh interval (default 1)")
    parser.add_argument("--theme", metavar="NAME", help="gpumix-dark (default), gpumix-light, gpumix-16, or a user theme")
    parser.add_argument("--history-minutes", type=at_most(positive_float, MAX_HISTORY_MINUTES), metavar="MIN",
                        help=f"history kept for charts (default {DEFAULT_HISTORY_MINUTES:g}; a hub of its own only)")
    parser.add_argument("--power-budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                        help="the machine's GPU power budget (default: the rig's, if simulated; a hub of its own only)")
    parser.add_argument("--readonly", action="store_true", help="hide every control (shared SSH sessions)")
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: the snapshot as JSON")
    add_retention_flag(parser, own_hub_only=True)
    add_scenario_flag(parser)
    add_power_config_flag(parser)
    add_record_flags(parser)
    add_hub_flags(parser)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def text_summary(snapshot: dict[str, Any]) -> str:
    """`--once` without --json: a short table, like `gpustat`."""
    from gpumix.tui import format as fmt  # no textual import needed for this
    from gpumix.tui.gpu_table import link_label

    lines = [f"{snapshot['hostname']}  {snapshot['source']}  driver {snapshot['driver']['driver_version']}"]
    for gpu in snapshot["gpus"]:
        label = f"{gpu['node']}/{gpu['node_index']}" if gpu.get("node") else str(gpu["index"])  # several hubs
        if gpu["lost"]:
            lines.append(f"[{label}] {gpu['tier']:<14} LOST")
            continue
        lines.append(
            f"[{label}] {gpu['tier']:<14} {fmt.pct(gpu['util_gpu_pct']):>4}"
            f" {fmt.mem_used_total(gpu['mem_used_bytes'], gpu['mem_total_bytes']):>10}"
            f" {fmt.power_draw_cap(gpu['power_w'], gpu['power_cap_w']):>10} {fmt.celsius(gpu['temperature_c']):>4}"
            f" pcie {link_label(gpu):<10} rx {fmt.rate(gpu['pcie_rx_bytes_per_s']):>5}/s tx {fmt.rate(gpu['pcie_tx_bytes_per_s']):>5}/s"
        )
    return "\n".join(lines + training_summary(snapshot))


ONCE_MAX_RANKS = 64  # a script wants the picture, not 4096 rows: the JSON has them all


def training_summary(snapshot: dict[str, Any]) -> list[str]:
    """The run, its ranks and the advisor's findings, after the GPU lines of `--once`."""
    from gpumix.tui import format as fmt
    from gpumix.tui.panels import run_line

    lines = ["run:" + run_line(snapshot).replace("\n", "\n    ")]
    plan = plan_line(snapshot.get("plan"))
    if plan:
        lines.append(plan)
    ranks = [rank for rank in snapshot.get("ranks") or [] if isinstance(rank, dict)]
    for rank in ranks[:ONCE_MAX_RANKS]:
        flags = (" straggler" if rank.get("straggler") else "") + ("" if rank.get("connected", True) else " gone")
        lines.append(f"  rank {fmt.plain(rank.get('job') or '-')}/{fmt.plain(rank.get('rank'))}"
                     f" step {fmt.plain(rank.get('step'))} {fmt.fixed(rank.get('step_time_s'), 3)}s"
                     f" {fmt.fixed(rank.get('samples_per_s'))} samples/s{flags}")
    if len(ranks) > ONCE_MAX_RANKS:
        lines.append(f"  +{len(ranks) - ONCE_MAX_RANKS} more ranks (--json has them all)")
    findings = [f for f in snapshot.get("findings") or [] if isinstance(f, dict)]
    lines.append(f"findings: {len(findings) or 'none'}")
    for finding in findings:
        lines.append(f"  {fmt.plain(finding.get('severity'))}: {fmt.plain(finding.get('title'), max_chars=200)}")
    return lines


def plan_line(plan: Any) -> str | None:
    """The plan in force (snapshot["plan"]) as one line: its id, job, global batch and split n_r (m_r x k_r)."""
    from gpumix.tui import format as fmt

    if not isinstance(plan, dict):
        return None
    name = f"plan {fmt.plain(plan.get('plan_id'), max_chars=40)}" if plan.get("plan_id") else "the job's own split"
    parts = [f"plan: {name} of {fmt.plain(plan.get('job'), max_chars=60)}"]
    shares = [share for share in plan.get("ranks") or [] if isinstance(share, dict)]
    if shares:
        split = " ".join(f"{fmt.plain(s.get('samples'))}({fmt.plain(s.get('micro_batch'))}x"
                         f"{fmt.plain(s.get('accumulation_steps'))})" for s in shares[:ONCE_MAX_RANKS])
        more = f" +{len(shares) - ONCE_MAX_RANKS} ranks" if len(shares) > ONCE_MAX_RANKS else ""
        parts.append(f"global batch {fmt.plain(plan.get('global_batch'))}, n_r(m_r x k_r) {split}{more}")
    else:
        parts.append("split not whole yet (ranks starting)")
    if plan.get("applied_at_step"):
        parts.append(f"from step {fmt.plain(plan.get('applied_at_step'))}")
    if fmt.number(plan.get("predicted_speedup")) is not None:
        parts.append(f"{fmt.fixed(plan.get('predicted_speedup'), 2)}x predicted")
    return ", ".join(parts)


def refuse_own_hub_flags(args: argparse.Namespace, why: str) -> None:
    for dest, flag in OWN_HUB_FLAGS:
        if getattr(args, dest) is not None:
            fail(PROG, f"{flag} sets up a hub of gpumix-top's own, and {why}")


def check_flags(args: argparse.Namespace) -> None:
    """Flags that cannot apply in the mode chosen are refused with one line, never dropped."""
    check_scenario_flag(PROG, args)
    if args.json and not args.once:
        fail(PROG, "--json needs --once (the interactive monitor draws a screen)")
    if args.token_file and not any(auth.is_tcp(address) for address in args.hub or []):
        fail(PROG, "--token-file is for tcp:// or tls:// hubs given with --hub")
    if args.record_max_size is not None and not args.record:
        resolve_record_flags(PROG, args)  # refuses it
    if args.replay:
        refuse_own_hub_flags(args, "--replay starts none (it shows a recording)")
    if args.hub:
        refuse_own_hub_flags(args, "--hub attaches to running hubs instead (set it on `gpumix hub`)")


def main(argv: list[str] | None = None) -> int:
    import gpumix.cli.lazy_archivers  # noqa: F401  (before argparse's formatter and tempfile load shutil: ~0.35 MB)

    reexecuted = forget_reexec()
    args = build_parser().parse_args(argv)
    check_flags(args)
    # the monitor drops its interpreter's docstrings (~2 MB) before Textual loads, once; one-shots never re-exec
    reexec_without_docstrings(interactive=argv is None and not args.once and not reexecuted)
    from gpumix.wire.paths import default_hub_address, hub_answers  # noqa: I001  (after the archivers' stand-ins)

    if args.replay:
        load_asyncio_without_ssl(args)
        from gpumix.tui.replay import run_replay

        return run_replay(PROG, args)
    if args.hub:
        source = open_source(PROG, args)
        if args.once:
            snapshot = source.snapshot()
            return print_snapshot(snapshot, args.json, text_summary, reason=failure_reason(source))
        return run_app(source, args)
    simulated = args.demo or args.sim
    if not simulated and hub_answers(default_hub_address()):  # attach to the running hub, --once too
        refuse_own_hub_flags(args, f"a hub already runs at {default_hub_address()}: set it on `gpumix hub`"
                                   " (record with `gpumix hub --record FILE`)")
        client = HubClient(default_hub_address(), readonly=args.readonly)
        client.fresh = args.once  # a one-shot's busy GPUs' PCIe read now, not the slow schedule's last
        if args.once:  # instant: the hub's rates, ranks and findings, no NVML start-up here
            print(f"{PROG}: using the running hub at {default_hub_address()}", file=sys.stderr, flush=True)
            return print_snapshot(client.snapshot(), args.json, text_summary, reason=failure_reason(client))
        return run_app(client, args)
    return run_with_own_hub(args)


def run_with_own_hub(args: argparse.Namespace) -> int:
    """gpumix-top with a hub of its own (the GPUs, --demo or --sim), until the app or the one-shot ends."""
    from gpumix.wire.paths import default_hub_address
    simulated = args.demo or args.sim
    # the hub, NVML and the simulator load only here: a one-shot that attaches never needs them (issue 13)
    load_asyncio_without_ssl(args)
    from gpumix.cli.hardware import RigError, open_hardware
    from gpumix.cli.node import demo_socket_path, start_node
    from gpumix.hub.connections import HubAlreadyRunning
    from gpumix.hw.types import NoDriverError

    try:
        hardware = open_hardware(demo=args.demo, sim_file=args.sim)
    except NoDriverError as error:
        fail(PROG, f"{error}. Try `gpumix-top --demo` to see a simulated rig.")
    except RigError as error:
        fail(PROG, str(error))
    if not args.once:  # the monitor: pynvml less what gpumix never calls, before Textual loads (~1 MB; issue 13)
        from gpumix.hw.nvml_narrow import narrow_pynvml

        narrow_pynvml()
    if args.power_budget:
        hardware.power_budget_w = args.power_budget
    apply_power_config(PROG, args, hardware)
    socket_path = demo_socket_path() if simulated else default_hub_address()
    try:
        history_minutes = args.history_minutes or DEFAULT_HISTORY_MINUTES
        retention_s = 60 * (args.retention_minutes or DEFAULT_RETENTION_MINUTES)
        node = start_node(hardware, socket_path, interval_s=args.interval, history_s=history_minutes * 60,
                          rank_retention_s=retention_s, scenario=args.scenario,
                          demo=args.demo, sample_in_thread=not args.once)
    except (HubAlreadyRunning, OSError, ValueError) as error:  # ValueError: an unusable --scenario
        fail(PROG, f"cannot start a hub on {socket_path}: {error}")
    recorder = None
    try:
        resolve_record_flags(PROG, args)
        recorder = start_recording(PROG, args, node.hub)
        if args.once:
            return print_once(node, as_json=args.json, wait_for_ranks=len(hardware.backend.gpus()) if args.demo else 0)
        return run_app(node.hub, args)
    finally:
        node.stop()
        if recorder is not None:
            recorder.close()


def load_asyncio_without_ssl(args: argparse.Namespace) -> None:
    """Before Textual or the hub's server loads asyncio: without ssl unless a tls:// hub is named (--hub,
    $GPUMIX_HUB). gpumix-top's loops never speak TLS (a tls:// hub is read by the blocking client), and
    ssl with OpenSSL is ~2-5 MB of RSS (gpumix/cli/asyncio_without_ssl.py)."""
    from gpumix.wire.paths import default_hub_address

    if not any(auth.is_tls(address) for address in getattr(args, "hub", None) or [default_hub_address()]):
        import_asyncio_without_ssl()


def run_app(source: Any, args: argparse.Namespace) -> int:
    load_asyncio_without_ssl(args)
    import gpumix.cli.lazy_cell_table  # noqa: F401  (before Textual: Rich's width table when a character needs it)
    import gpumix.cli.lazy_stand_ins  # noqa: F401  (before Textual: what it imports and never calls, on first use)
    from gpumix.tui.app import GpumixApp  # textual loads only for the interactive monitor

    # App.run imports textual.pilot (and its headless driver) for an auto-pilot the monitor never has
    gpumix.cli.lazy_stand_ins.install_stand_in("textual.pilot", ("Pilot",))
    app = GpumixApp(source, interval_s=args.interval, theme=args.theme, readonly=args.readonly)
    app.run()
    return app.return_code or 0  # 1 when the app ended on an unhandled exception (Textual prints it)


def print_once(node: Node, as_json: bool, wait_for_ranks: int = 0) -> int:
    hub = node.hub
    snapshot = hub.tick_with_rates()  # real GPUs: one reading is enough
    if snapshot is not None:
        return print_snapshot(snapshot, as_json, text_summary)
    hub.tick()
    if wait_for_ranks:  # the demo ranks' first steps, a few seconds at most
        node.wait_for_ranks(wait_for_ranks, timeout_s=10.0)
    else:
        time.sleep(min(hub.interval_s, 0.5))  # PCIe rates are differences of two counter readings
    return print_snapshot(hub.tick(), as_json, text_summary)


if __name__ == "__main__":
    sys.exit(main())
