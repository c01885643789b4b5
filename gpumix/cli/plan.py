"""`gpumix plan`: the per-rank batch split from live measurements, and --apply to restart into it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpumix.cli.common import (
    MAX_GLOBAL_BATCH,
    MAX_GRADIENT_MB,
    MAX_GRANULARITY,
    at_most,
    fail,
    positive_float,
    positive_int,
)

# The planner, the kept probe results and the power split load inside the functions that use them:
# `gpumix` builds this parser for every command (issue 13: `doctor` and `power show` need none of them).

PROG = "gpumix"


def add_plan_parser(commands: Any) -> None:
    plan = commands.add_parser("plan", help="per-rank batch split for the running job (--apply restarts into it)")
    source = plan.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the simulated rig and its demo job")
    source.add_argument("--hub", metavar="PATH", help="the hub's socket (default: $GPUMIX_HUB or the runtime dir)")
    plan.add_argument("--job", help="which job (needed when several report)")
    plan.add_argument("--global-batch", type=at_most(positive_int, MAX_GLOBAL_BATCH), metavar="B",
                      help="samples per optimizer step (default: as now)")
    plan.add_argument("--gradient-mb", type=at_most(positive_float, MAX_GRADIENT_MB), metavar="MB",
                      help="gradient size, if the ranks do not say")
    plan.add_argument("--granularity", type=at_most(positive_int, MAX_GRANULARITY), metavar="N",
                      help="each rank a multiple of N samples (default: as `gpumix run` says, else 1)")
    leave_out = plan.add_mutually_exclusive_group()
    leave_out.add_argument("--exclude", type=rank_list, metavar="R,R,...",
                           help="leave these ranks out (with --apply the job restarts with fewer ranks)")
    leave_out.add_argument("--exclude-tier", metavar="TIER", help="leave every rank of this GPU tier out")
    plan.add_argument("--apply", action="store_true", help="restart the job into the plan (needs `gpumix run`)")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--deepspeed-config", metavar="BASE.json",
                      help="also write ds_config_rank{R}.json for the split (common accumulation steps)")
    plan.add_argument("--out", metavar="DIR", help="where --deepspeed-config writes (default: here)")


def check_plan_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.out is not None and not args.deepspeed_config:
        parser.error("argument --out: only --deepspeed-config writes files")


def plan_text(job: str, data: dict[str, Any]) -> str:
    lines = [f"job {job}: global batch {data['global_batch']}"]
    lines.append(f"{'rank':>4} {'n_r':>5} {'m_r':>5} {'k_r':>4} {'weight':>7}  limited by")
    for rank in data["ranks"]:
        lines.append(f"{rank['rank']:>4} {rank['samples']:>5} {rank['micro_batch']:>5} {rank['accumulation_steps']:>4}"
                     f" {rank['loss_weight']:>7.3f}  {', '.join(rank['limited_by'] or []) or '-'}")
    for name in ("current", "proposed", "ideal"):
        p = data[name]
        lines.append(f"{name:>9}: step {p['step_time_s']:.3f} s (compute {p['compute_s']:.3f} + all-reduce"
                     f" {p['allreduce_s']:.3f}), {p['samples_per_s']:.0f} samples/s")
    if data["speedup"] is not None:
        lines.append(f"  speedup of the proposal over the current split: {data['speedup']:.2f}x")
    fast = data.get("fast_tier_only")
    if fast:
        lines.append(f"  alternative: train on the {fast['tier']} tier only (ranks {fast['ranks']}), others for eval:"
                     f" {fast['samples_per_s']:.0f} samples/s")
    without = data.get("without_tier")
    if without:
        lines.append(f"  or: leave the {without['tier_left_out']} tier out of the job: {without['samples_per_s']:.0f}"
                     f" samples/s ({without['speedup_over_current']:.2f}x;"
                     f" gpumix plan --exclude-tier '{without['tier_left_out']}' --apply)")
    if data.get("note"):
        lines.append(f"  note: {data['note']}")
    return "\n".join(lines)


def power_text(power: dict[str, Any]) -> str:
    line = f"  power: predicted draw {power['predicted_total_w']:.0f} W (now {power['draw_now_total_w']:.0f} W)"
    limits = [f"{b['name']} {b['predicted_w']:.0f}/{b['usable_w']:.0f} W" for b in power["budgets"]]
    line += (" against " + ", ".join(limits)) if limits else ", no budget declared"
    return line + (f"\n  warning: {power['warning']}" if power["warning"] else "")


def run_plan_command(args: argparse.Namespace, source: Any) -> int:
    """`source` has snapshot() and control(): a HubClient, or the demo's in-process hub."""
    import uuid

    from gpumix.advice.probe_results import job_allreduce_floor
    from gpumix.plan.inputs import PlanInputError, pick_job, plan_from_snapshot
    from gpumix.plan.planner import plan_to_json
    from gpumix.power.split_draw import draw_against_budgets

    snapshot = source.snapshot()
    if snapshot is None:
        fail(PROG, "no hub answers: start one (`gpumix hub`, or gpumix-top) or use --demo")
    gradient_bytes = args.gradient_mb * 1e6 if args.gradient_mb else None
    try:
        exclude = excluded_ranks(snapshot, args.job, args.exclude, args.exclude_tier)
        job, plan = plan_from_snapshot(snapshot, args.job, args.global_batch, gradient_bytes, args.granularity, exclude,
                                       allreduce_floor=job_allreduce_floor(snapshot, pick_job(snapshot, args.job)))
    except (PlanInputError, ValueError) as error:
        fail(PROG, str(error), code=1)
    data = {**plan_to_json(plan), "job": job, "plan_id": uuid.uuid4().hex[:8]}
    if args.deepspeed_config:
        data["deepspeed"] = deepspeed_outputs(args, data)
    reply = None
    if args.apply:
        refusal = apply_refusal(snapshot, job, data)
        if refusal is not None:
            fail(PROG, f"not applied: {refusal}", code=1)
        if data["kept_current"]:
            # nothing faster to restart into: a restart would only cost the job its relaunch
            reply = {"ok": True, "restarted": False, "message": "the current split stays; the job is not restarted"}
        else:
            restart_plan = deepspeed_plan(data) if args.deepspeed_config else data
            reply = source.control({"type": "replan", "job": job, "plan": restart_plan})
    power = draw_against_budgets(snapshot, data)  # the split at the caps in force, against every budget
    if args.json:
        from gpumix.cli.plan_joint import joint_json

        granularity = args.granularity or ((snapshot.get("jobs") or {}).get(job) or {}).get("granularity") or 1
        joint = joint_json(snapshot, job, data, int(granularity), gradient_bytes)  # split and caps together, or why not
        print(json.dumps({**data, "power": power, "joint": joint, "applied": reply}, indent=1))
    else:
        print(plan_text(job, data))
        print(power_text(power))
        if reply is not None:
            applied = reply["ok"] and reply.get("restarted", True)
            print(("applied: " if applied else "not applied: ") + reply["message"])
    return 0 if reply is None or reply["ok"] else 1


def running_global_batch(snapshot: dict[str, Any], job: str) -> int | None:
    """The job's samples per optimizer step now: the sum of what its live ranks report; None when
    they do not all say."""
    ranks = [r for r in snapshot.get("ranks", []) if r.get("job") == job and r.get("connected")]
    reported = [r.get("samples") for r in ranks]
    if not reported or not all(isinstance(n, (int, float)) and n > 0 for n in reported):
        return None
    return round(sum(reported))


def apply_refusal(snapshot: dict[str, Any], job: str, data: dict[str, Any]) -> str | None:
    """Why --apply must not restart into this plan, or None. A restart resumes each rank at
    (epoch, step) = divmod(steps done, dataset // B): another B would repeat or skip samples."""
    running = running_global_batch(snapshot, job)
    if running is not None and data["global_batch"] != running:
        return (f"--global-batch {data['global_batch']} is not the job's {running}: a restart keeps the"
                " global batch (change it with a fresh start)")
    return None


def deepspeed_plan(data: dict[str, Any]) -> dict[str, Any]:
    """The plan to restart a DeepSpeed job into: the DeepSpeed split's shares (one k for every rank)
    in place of the DDP split's, and each kept rank's config file. Left-out ranks stay at 0 samples,
    so the relaunch drops them as it would from the DDP plan."""
    split = data["deepspeed"]
    kept = iter(split["ranks"])  # in the order of the kept ranks, renumbered from 0
    ranks = []
    for rank in sorted(data["ranks"], key=lambda r: r["rank"]):
        if rank["samples"] > 0:
            share = next(kept)
            rank = {**rank, **{key: share[key] for key in
                               ("samples", "micro_batch", "accumulation_steps", "loss_weight")}}
        ranks.append(rank)
    configs = [str(Path(path).resolve()) for path in split["configs"]]
    return {**data, "ranks": ranks, "deepspeed_configs": configs}


def rank_list(text: str) -> frozenset[int]:
    try:
        ranks = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of ranks: {text!r} (e.g. 0,1,2)") from None
    if any(rank < 0 for rank in ranks):
        raise argparse.ArgumentTypeError(f"ranks are >= 0: {text!r}")
    return ranks


def excluded_ranks(snapshot: dict[str, Any], job: str | None, ranks: frozenset[int] | None,
                   tier: str | None) -> frozenset[int]:
    """--exclude as given, or the ranks whose GPU is of --exclude-tier (its name, any case)."""
    from gpumix.plan.inputs import PlanInputError, pick_job

    if tier is None:
        return ranks or frozenset()
    job = pick_job(snapshot, job)
    gpus = {gpu["uuid"]: gpu for gpu in snapshot["gpus"]}
    found = frozenset(r["rank"] for r in snapshot.get("ranks", []) if r.get("job") == job and r.get("connected")
                      and (gpus.get(r.get("gpu_uuid") or "", {}).get("tier") or "").lower() == tier.lower())
    if not found:
        names = sorted({gpu.get("tier") or "?" for gpu in snapshot["gpus"]})
        raise PlanInputError(f"no rank of job {job!r} runs on a {tier!r} GPU (tiers: {', '.join(names)})")
    return found


def deepspeed_outputs(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    from gpumix.plan.deepspeed import deepspeed_split, write_configs

    try:
        base = json.loads(Path(args.deepspeed_config).read_text())
    except (OSError, ValueError) as error:
        fail(PROG, f"{args.deepspeed_config}: not a readable JSON config: {error}")
    if not isinstance(base, dict):
        fail(PROG, f"{args.deepspeed_config}: a DeepSpeed config is a JSON object, not {type(base).__name__}")
    try:
        split = deepspeed_split(data)
    except ValueError as error:
        fail(PROG, f"no DeepSpeed split: {error}", code=1)
    try:
        paths = write_configs(split, base, Path(args.out or "."))
    except OSError as error:
        fail(PROG, f"cannot write the DeepSpeed configs to {args.out or '.'}: {error.strerror or error}")
    return {**split, "configs": [str(path) for path in paths]}


def wait_for_steps(source: Any, steps: int, timeout_s: float) -> None:
    """The demo's ranks report a few steps before a plan means anything."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = source.snapshot() or {}
        ranks = [r for r in snapshot.get("ranks", []) if r.get("connected")]
        if ranks and min(r.get("step") or 0 for r in ranks) >= steps:
            return
        time.sleep(0.1)
