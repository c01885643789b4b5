"""`gpumix power` and `gpumix doctor`: power caps and the advisor, for scripts."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from gpumix.advice.advisor import AdvisorSettings, exit_code, findings
from gpumix.cli.common import (
    MAX_POWER_W,
    add_output_flags,
    add_rig_flags,
    at_most,
    fail,
    finite_float,
    gpu_index,
    positive_float,
)
from gpumix.hub.core import Hub
from gpumix.hw.hardware import Hardware
from gpumix.power.budget import BudgetError, fit_to_budget, gpu_power_from_snapshot
from gpumix.power.caps import PowerController, PowerError

PROG = "gpumix"


def add_power_parser(commands: Any) -> None:
    """`gpumix power [--demo|--sim RIG] [--json] [--dry-run] ACTION ...`: the shared flags are taken before
    or after the action (each action repeats them, defaulting to SUPPRESS so none is overwritten)."""
    power = commands.add_parser("power", help="show, set, reset or fit GPU power caps")
    add_rig_flags(power)
    add_output_flags(power, dry_run=True)
    power.add_argument("--budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                       help="with fit: the budget to fit (default: the rig's)")
    actions = power.add_subparsers(dest="action", required=True, parser_class=type(power))

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        add_rig_flags(parser, nested=True)
        add_output_flags(parser, nested=True, dry_run=True)
        return parser

    action("show", "caps, draw and allowed ranges")
    set_cap = action("set", "set a GPU's cap")
    set_cap.add_argument("gpu", type=gpu_index)
    set_cap.add_argument("watts", type=at_most(finite_float, MAX_POWER_W))  # the card's range is checked later
    reset = action("reset", "back to the card's default cap")
    reset.add_argument("gpu", type=gpu_index)
    fit = action("fit", "caps that fit a machine budget at the least throughput cost")
    fit.add_argument("--budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                     default=argparse.SUPPRESS, help="default: the rig's budget")


def check_power_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.budget is not None and args.action != "fit":
        parser.error(f"argument --budget: only `gpumix power fit` takes a budget, not `{args.action}`")


def snapshot_of(hardware: Hardware, hub: Hub | None = None, settle_s: float = 0.0) -> dict[str, Any]:
    """From the running hub (the demo job's), else two readings of the hardware."""
    if hub is not None:
        return hub.tick()
    hub = Hub(hardware)
    hub.tick()
    if settle_s:
        time.sleep(settle_s)
    return hub.tick()


def show_table(snapshot: dict[str, Any]) -> str:
    lines = [f"{'GPU':>3} {'tier':<14} {'draw W':>7} {'cap W':>6} {'default':>7} {'range W':>10}"]
    for gpu in snapshot["gpus"]:
        def watts(value: float | None) -> str:
            return "N/A" if value is None else f"{value:.0f}"
        span = f"{watts(gpu['power_limit_min_w'])}-{watts(gpu['power_limit_max_w'])}"
        lines.append(f"{gpu['index']:>3} {gpu['tier']:<14} {watts(gpu['power_w']):>7} {watts(gpu['power_cap_w']):>6}"
                     f" {watts(gpu['power_limit_default_w']):>7} {span:>10}")
    caps = sum(g["power_cap_w"] or 0 for g in snapshot["gpus"])
    budget = snapshot.get("power_budget_w")
    lines.append(f"sum of caps {caps:.0f} W" + (f", budget {budget:.0f} W" if budget else ""))
    return "\n".join(lines)


def run_power(args: argparse.Namespace, hardware: Hardware, hub: Hub | None = None) -> int:
    controller = PowerController(hardware.backend)
    try:
        if args.action == "show":
            snapshot = snapshot_of(hardware, hub)
            if args.json:
                print(json.dumps([{k: g[k] for k in ("index", "uuid", "tier", "power_w", "power_cap_w", "power_limit_default_w",
                                                      "power_limit_min_w", "power_limit_max_w")} for g in snapshot["gpus"]], indent=1))
            else:
                print(show_table(snapshot))
            return 0
        if args.action in ("set", "reset"):
            change = (controller.set_cap(args.gpu, args.watts, dry_run=args.dry_run) if args.action == "set"
                      else controller.reset_cap(args.gpu, dry_run=args.dry_run))
            after = None if args.dry_run else hardware.backend.power_limit_w(args.gpu)
            if args.json:
                print(json.dumps({**change.to_json(), "cap_now_w": after}))
            else:
                verb = "would set" if args.dry_run else "set"
                print(f"GPU {change.gpu_index}: {verb} cap {change.old_w or 0:.0f} W -> {change.new_w:.0f} W")
            return 0
        snapshot = snapshot_of(hardware, hub)
        budget = args.budget or snapshot.get("power_budget_w")
        if not budget:
            fail(PROG, "power fit needs --budget WATTS (this rig names none)")
        fit = fit_to_budget(gpu_power_from_snapshot(snapshot), budget)
        if not args.dry_run:
            for proposal in fit.proposals:
                if abs(proposal.new_w - proposal.old_w) >= 0.5:
                    controller.set_cap(proposal.index, proposal.new_w)
        if args.json:
            print(json.dumps({**fit.to_json(), "applied": not args.dry_run}, indent=1))
        else:
            print(f"caps {fit.caps_before_w:.0f} W -> {fit.caps_after_w:.0f} W for a {budget:.0f} W budget;"
                  f" predicted throughput kept {100 * fit.throughput_kept:.1f} %"
                  + (" (dry run: nothing changed)" if args.dry_run else ""))
            for p in fit.proposals:
                print(f"  GPU {p.index} {p.tier:<14} {p.old_w:>5.0f} -> {p.new_w:>5.0f} W  {p.reason}")
        return 0
    except (PowerError, BudgetError) as error:
        fail(PROG, str(error), code=1)


def run_doctor(args: argparse.Namespace, hardware: Hardware, hub: Hub | None = None) -> int:
    snapshot = snapshot_of(hardware, hub, settle_s=0.5)
    host = snapshot.get("host") or {}
    settings = AdvisorSettings(power_budget_w=getattr(args, "power_budget", None) or hardware.power_budget_w,
                               has_infiniband=bool(host.get("infiniband")),
                               **({"p2p_4090_min_driver": args.min_4090_p2p_driver} if args.min_4090_p2p_driver else {}))
    found = findings(snapshot, settings)
    if args.json:
        print(json.dumps({"exit_code": exit_code(found), "findings": [f.to_json() for f in found]}, indent=1))
    else:
        if not found:
            print("healthy: no findings")
        for finding in found:
            print(f"[{finding.severity}] {finding.title}\n    evidence: {finding.evidence}\n    fix: {finding.fix}")
    return exit_code(found)
