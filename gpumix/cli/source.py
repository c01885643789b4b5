"""Where `gpumix power`, `doctor` and `plan` read and act: the running hub when one answers (or
--hub names it), else the GPUs or the rig named, through a hub in this process.

The attached path loads only the client: the hub, NVML and the simulated world are imported
inside the branches that start a hub of their own (issue 13: an attached one-shot in <= 0.15 s)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpumix.cli.common import fail
from gpumix.hub.client import HubClient
from gpumix.wire import auth
from gpumix.wire.paths import default_hub_address, hub_answers

if TYPE_CHECKING:
    from gpumix.hw.hardware import Hardware

PROG = "gpumix"


def run_on_source(args: argparse.Namespace, run: Callable[..., int]) -> int:
    """power and doctor read (and act) where the TUI would: the running hub when there is one or --hub
    names it, else the GPUs or the rig named, through a hub in this process. An implicit choice is said
    on stderr in one line."""
    address = args.hub or (None if args.demo or args.sim else default_hub_address())
    if address is not None and (args.hub or (not auth.is_tcp(address) and hub_answers(address))):
        if not args.hub:
            print(f"{PROG}: using the running hub at {address}", file=sys.stderr, flush=True)
        client = HubClient(address, token=read_token_for(address))
        client.fresh = True  # busy GPUs' PCIe read now, not the slow schedule's last (no dashboard may view it)
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
    """`gpumix plan`: against the running hub, or (--demo) a demo node of its own."""
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
