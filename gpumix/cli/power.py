"""`gpumix power`: power caps for scripts (show, set, reset, fit, profile)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from gpumix.cli.common import (
    MAX_POWER_W,
    add_output_flags,
    add_rig_flags,
    at_most,
    fail,
    finite_float,
    gpu_index,
    positive_float,
    positive_int,
    stderr_line,
)

# the flags' bounds and defaults, without the profiler
from gpumix.power import profile_limits as limits

# The hub and the profiler load when used: building `gpumix`'s parsers, or `power show` attached to a
# running hub, needs neither (issue 13).
if TYPE_CHECKING:
    from gpumix.hub.core import Hub
    from gpumix.hw.hardware import Hardware
    from gpumix.power.profile import ProfileRun
    from gpumix.wire.snapshot_types import Snapshot, Source

    PowerSource = Source  # where power (and doctor) read and act: the running hub (a HubClient), or one here

PROG = "gpumix"


def add_power_parser(commands: Any) -> None:
    """`gpumix power [--demo|--sim RIG] [--json] [--dry-run] ACTION ...`: the shared flags are taken before
    or after the action (each action repeats them, defaulting to SUPPRESS so none is overwritten)."""
    power = commands.add_parser("power", help="show, set, reset or fit GPU power caps")
    add_rig_flags(power, hub=True)
    add_output_flags(power, dry_run=True)
    power.add_argument("--budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                       help="with fit: the budget to fit (default: the rig's)")
    actions = power.add_subparsers(dest="action", required=True, parser_class=type(power))

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        add_rig_flags(parser, nested=True, hub=True)
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
    prof = action("profile", "step one tier's caps down while training runs, measure, restore (opt-in)")
    prof.add_argument("tier", help="the tier: its name as `gpumix power show` prints it, or its model (rtx3090)")
    add_profile_flags(power)  # before or after the action, as --budget
    add_profile_flags(prof, nested=True)


PROFILE_FLAGS = ("steps", "step_pct", "hold", "restore_wait")


def add_profile_flags(parser: argparse.ArgumentParser, nested: bool = False) -> None:
    """The profile's flags; nested (on the action) they default to SUPPRESS, as add_rig_flags' do."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    parser.add_argument("--steps", type=at_most(positive_int, limits.MAX_STEPS), **default,
                        help=f"with profile: cap steps down (default {limits.DEFAULT_STEPS})")
    parser.add_argument("--step-pct", type=at_most(positive_float, 100 * limits.MAX_STEP_SHARE), metavar="PERCENT",
                        **default, help="with profile: each step, this share of the card's default limit in %%"
                                        f" (default {100 * limits.DEFAULT_STEP_SHARE:g})")
    parser.add_argument("--hold", type=at_most(positive_float, limits.MAX_HOLD_S), metavar="SECONDS", **default,
                        help=f"with profile: each step held this long (default {limits.DEFAULT_HOLD_S:g})")
    parser.add_argument("--restore-wait", type=at_most(positive_float, 3600.0), metavar="SECONDS", **default,
                        help="with profile: a lost hub is waited for this long to put the caps back"
                             f" (default {limits.RESTORE_WAIT_S:g})")


def check_power_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.budget is not None and args.action != "fit":
        parser.error(f"argument --budget: only `gpumix power fit` takes a budget, not `{args.action}`")
    for name in PROFILE_FLAGS:
        if getattr(args, name, None) is not None and args.action != "profile":
            flag = "--" + name.replace("_", "-")
            parser.error(f"argument {flag}: only `gpumix power profile` takes it, not `{args.action}`")


def local_source(hardware: Hardware, settle_s: float = 0.0) -> Hub:
    """A hub in this process that has read the hardware with PCIe rates in it: once on real GPUs
    (Hub.tick_with_rates); a simulated world twice, settle_s apart (rates are differences)."""
    from gpumix.hub.core import Hub

    hub = Hub(hardware)
    if hub.tick_with_rates() is not None:
        return hub
    hub.tick()
    if settle_s:
        time.sleep(settle_s)
    hub.tick()
    return hub


def read_snapshot(source: PowerSource) -> dict[str, Any]:
    snapshot = source.snapshot()
    if snapshot is None:
        fail(PROG, getattr(source, "last_error", None) or "the hub gave no snapshot")
    return snapshot


def show_table(snapshot: Snapshot) -> str:
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


def run_power(args: argparse.Namespace, source: PowerSource) -> int:
    """show, set, reset and fit through `source`'s power controls: the same checks, audit and
    refusals as the TUI's, whether the hub runs in this process or as root elsewhere."""
    if args.action == "show":
        snapshot = read_snapshot(source)
        if args.json:
            print(json.dumps([{k: g[k] for k in ("index", "uuid", "tier", "power_w", "power_cap_w", "power_limit_default_w",
                                                  "power_limit_min_w", "power_limit_max_w")} for g in snapshot["gpus"]], indent=1))
        else:
            print(show_table(snapshot))
        return 0
    if args.action == "profile":
        return run_profile(args, source)
    request: dict[str, Any] = {"type": "power", "action": args.action, "dry_run": args.dry_run}
    if args.action == "fit":
        snapshot = read_snapshot(source)
        budget = args.budget or snapshot.get("power_budget_w")
        if not budget and not snapshot.get("power_layout"):  # supplies and circuits are budgets too
            fail(PROG, "power fit needs --budget WATTS (this machine names no budget, supplies or circuits)")
        request["budget_w"] = budget
    else:
        request["gpus"] = [args.gpu]
        if args.action == "set":
            request["watts"] = args.watts
    reply = source.control(request)
    if not reply.get("ok"):
        fail(PROG, str(reply.get("message")), code=1)
    if args.action == "fit":
        print_fit(reply["fit"], args.json, args.dry_run)
        return 0
    change = reply["changes"][0]
    after = None if args.dry_run else next(
        (g["power_cap_w"] for g in read_snapshot(source)["gpus"] if g["index"] == args.gpu), None)
    if args.json:
        print(json.dumps({**change, "cap_now_w": after}))
    else:
        verb = "would set" if args.dry_run else "set"
        print(f"GPU {change['gpu_index']}: {verb} cap {change['old_w'] or 0:.0f} W -> {change['new_w']:.0f} W")
    if reply.get("audit_error"):
        print(f"{PROG}: warning: the audit log could not be written: {reply['audit_error']}", file=sys.stderr)
    return 0


class Interrupted(Exception):
    """SIGINT or SIGTERM during a profile: the caps are put back before the command exits."""


def run_profile(args: argparse.Namespace, source: PowerSource) -> int:
    """`gpumix power profile TIER`: the dry run prints the steps and sends nothing; a run restores
    the original caps however it ends (gpumix.power.profile)."""
    from gpumix.power import profile

    def say(line: str) -> None:
        stderr_line(f"{PROG}: {line}")

    def given(name: str, default: float) -> Any:
        value = getattr(args, name, None)
        return default if value is None else value

    profiler = profile.Profiler(source, restore_wait_s=given("restore_wait", limits.RESTORE_WAIT_S), say=say)
    try:
        run = profiler.prepare(args.tier, given("steps", limits.DEFAULT_STEPS),
                               given("step_pct", 100 * limits.DEFAULT_STEP_SHARE) / 100, given("hold", limits.DEFAULT_HOLD_S))
    except profile.ProfileError as error:
        fail(PROG, str(error), code=1)
    if args.dry_run:
        print_profile(run, args.json, applied=False)
        return 0
    received: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        if not received:  # the first signal stops the profile; later ones must not stop the restore
            received.append(signum)
            raise Interrupted(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    problem, code = None, 0
    try:
        profiler.run(run)
    except Interrupted as signame:
        problem, code = f"interrupted ({signame})", 128 + received[0]
    except profile.ProfileError as error:
        problem, code = str(error), 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if run.restored is False:
        fail(PROG, f"{problem or 'the profile ended'}; {profile.not_restored_line(run.original_caps_w)}", code=code or 1)
    if problem is not None:
        tail = "; the original caps are restored" if run.restored else "; nothing was changed"
        fail(PROG, problem + tail, code=code)
    print_profile(run, args.json, applied=True)
    return 0


def print_profile(run: ProfileRun, as_json: bool, applied: bool) -> None:
    if as_json:
        print(json.dumps({**run.to_json(), "applied": applied}, indent=1))
        return
    originals = ", ".join(f"GPU {i} {w:.0f} W" for i, w in run.original_caps_w.items())
    print(f"tier {run.tier}: caps now {originals}" + ("" if applied else " (dry run: nothing changed)"))
    base = run.measured[0]["samples_per_s"] if run.measured else None
    for number, caps in enumerate(run.steps, start=1):
        line = f"  step {number}: " + ", ".join(f"GPU {i} {w:.0f} W" for i, w in caps.items())
        if not applied:
            print(line + f", held {run.hold_s:g} s")
            continue
        figures = run.measured[number] if number < len(run.measured) else {}
        rate = figures.get("samples_per_s")
        kept = f" ({100 * rate / base:.1f} % of {base:.1f})" if rate and base else ""
        print(line + (f": {rate:.1f} samples/s{kept}" if rate else ": not measured")
              + ("" if figures.get("settled", True) else " (too few steps at this cap)"))
    if applied:
        print(f"  restored: {originals}")


def print_fit(fit: dict[str, Any], as_json: bool, dry_run: bool) -> None:
    if as_json:
        print(json.dumps({**fit, "applied": not dry_run}, indent=1))
        return
    print(f"caps {fit['caps_before_w']:.0f} W -> {fit['caps_after_w']:.0f} W for a {fit['budget_w']:.0f} W budget;"
          f" predicted throughput kept {100 * fit['throughput_kept']:.1f} %"
          + (" (dry run: nothing changed)" if dry_run else ""))
    for p in fit["gpus"]:
        above = f" ({p['above_stock_curve']})" if p.get("above_stock") and p.get("above_stock_curve") else ""
        print(f"  GPU {p['index']} {p['tier']:<14} {p['old_w']:>5.0f} -> {p['new_w']:>5.0f} W  {p['reason']}{above}")
