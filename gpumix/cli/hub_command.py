"""`gpumix hub`: this node's hub, headless (history survives a closed TUI or a dropped SSH link)."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from gpumix.cli.common import (
    DEFAULT_RETENTION_MINUTES,
    MAX_HISTORY_MINUTES,
    MAX_INTERVAL_S,
    MAX_POWER_W,
    add_power_config_flag,
    add_retention_flag,
    add_rig_flags,
    add_scenario_flag,
    apply_power_config,
    at_most,
    check_scenario_flag,
    fail,
    positive_float,
)
from gpumix.cli.recording import (
    add_prometheus_flags,
    add_record_flags,
    check_prometheus,
    resolve_record_flags,
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
from gpumix.cli.source import opened_hardware
from gpumix.wire.paths import default_hub_address

PROG = "gpumix"


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
