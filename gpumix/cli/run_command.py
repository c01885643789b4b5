"""`gpumix run`: supervise a training job, restart it under a new plan on request or by itself."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from gpumix.cli.common import (
    MAX_GRANULARITY,
    at_most,
    fail,
    non_negative_float,
    positive_float,
    positive_int,
    stderr_line,
)
from gpumix.wire.paths import default_hub_address

PROG = "gpumix"


def add_run_parser(commands: Any) -> None:
    run = commands.add_parser("run", help="supervise a training job; restart it under a new plan on request",
                              usage="gpumix run [--job NAME] [--plan FILE] [--hub PATH] [--granularity N]"
                                    " [--auto-replan] [--stair-probe] -- COMMAND ...")
    run.add_argument("--job", help="the job's name (default: the script's name)")
    run.add_argument("--plan", metavar="FILE", help="start with this plan (JSON from `gpumix plan --json`)")
    run.add_argument("--hub", metavar="PATH", help="the hub's socket (default: $GPUMIX_HUB or the runtime dir)")
    run.add_argument("--granularity", type=at_most(positive_int, MAX_GRANULARITY), default=1, metavar="N",
                     help="re-plans give each rank a multiple of N samples (e.g. 64: GPUs compute whole tiles)")
    run.add_argument("--auto-replan", action="store_true",
                     help="re-plan and restart by itself when a split is predicted faster (never leaves ranks out)")
    run.add_argument("--stair-probe", action="store_true",
                     help="ask the first launch for a stair probe: a few steps at counts +-1 and +-2 granules"
                          " (--granularity) near each rank's, so the first re-plan sees where the GPUs' stairs are"
                          " (the script runs it: gpumix.agent.probe_schedule.requested_probe_steps)")
    run.add_argument("--auto-replan-min-speedup", type=at_most(positive_float, 100.0), default=1.05, metavar="X",
                     help="the predicted speedup an automatic re-plan needs (default 1.05; a plan that"
                          " interpolates between measured splits needs 60%% of the gain: 1.03)")
    run.add_argument("--auto-replan-max", type=at_most(positive_int, 1000), default=3, metavar="N",
                     help="automatic re-plans at most (default 3)")
    run.add_argument("--kill-grace", type=at_most(non_negative_float, 3600.0), default=10.0, metavar="SECONDS",
                     help="on stop, SIGTERM the job's processes, then SIGKILL them after this long (default 10;"
                          " a second Ctrl+C kills at once)")
    run.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND")


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
                            say=stderr_line, granularity=args.granularity,
                            auto_replan=AutoReplan(args.auto_replan_min_speedup, args.auto_replan_max)
                            if args.auto_replan else None, kill_grace_s=args.kill_grace,
                            stair_probe=args.stair_probe)
    signal.signal(signal.SIGINT, lambda *_: supervisor.stop())
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stop())
    try:
        return supervisor.run()
    except FileNotFoundError as error:
        fail(PROG, f"cannot start the job: {error.strerror}: {error.filename}")
