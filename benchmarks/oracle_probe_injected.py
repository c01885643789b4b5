"""What a stair probe's points would be worth, given straight to the hub (issue 16, session 23): an upper
bound for the probe, before any schedule, pass layout or measurement stands between the world and them.

benchmarks/oracle_replan.py, with one change: after the first launch's steps (the equal split), each rank's
stream gets a point, marked "probe", at its count + j granules for each j of --offsets: the median of 5 of
the world's noisy computes there (its seeded jitter; no loader stall), the micro-batch the largest divisor of
the count within the card's memory cap (the planner's own margin). Each rank is probed alone: no pairs, no
global batch kept. `oracle_replan.py --probe` runs the product's probe instead (agent/probe_schedule.py
through the hub's count runs).

    PYTHONPATH=TREE python -P benchmarks/oracle_probe_injected.py --offsets=-2,-1,1,2 --granularity 4 \
        [--seed N --no-shipped] [--unflagged] --out OUT.json

--unflagged: the points carry no "probe" mark, so the planner judges its curves' error by them as by
earlier splits' (plan.prediction.hindsight_error before session 23).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import oracle_replan  # noqa: E402  (the harness this varies, beside this file)

from gpumix.sim import job_model  # noqa: E402
from gpumix.sim.world import jitter  # noqa: E402

REPEATS = 5
OFFSETS = (-2, -1, 1, 2)
UNFLAGGED = False
_run = oracle_replan.Job.run


def run_then_probe(job: oracle_replan.Job, counts: Sequence[int], micro: Sequence[int],
                   caps_w: Sequence[float | None], probe: Sequence[Sequence[int]] = ()) -> dict[str, Any]:
    first = job.keys is None
    result = _run(job, counts, micro, caps_w, probe)
    if not first:
        return result
    streams = {stream.rank: stream for stream in job.hub._intake.table.streams.values()}
    for rank, n0 in enumerate(counts):
        cap = oracle_replan.micro_cap(job.rig, rank)
        for j in OFFSETS:
            n = n0 + j * oracle_replan.GRANULARITY
            if n < oracle_replan.GRANULARITY:
                continue
            m = next(n // k for k in range(1, n + 1) if n % k == 0 and n // k <= cap)
            mean = job.world.compute_s(rank, n, caps_w[rank], m)
            computes = sorted(mean * jitter(job.world.seed, rank, 10**6 + 100 * j + i)[0] for i in range(REPEATS))
            streams[rank].points.append({
                "samples": n, "compute_s": statistics.median(computes), "compute_spread_s": computes[3] - computes[1],
                "micro_batch": m, "mem_peak_bytes": job_model.memory_used_bytes(m), "t": job.clock.now_s,
                **({} if UNFLAGGED else {"probe": True})})
    job.hub.tick()  # the snapshot the first look reads is the tick's
    return result


def main() -> None:
    global OFFSETS, UNFLAGGED
    for argument in list(sys.argv[1:]):
        if argument.startswith("--offsets="):
            OFFSETS = tuple(int(j) for j in argument.split("=", 1)[1].split(","))
            sys.argv.remove(argument)
        elif argument == "--unflagged":
            UNFLAGGED = True
            sys.argv.remove(argument)
    oracle_replan.Job.run = run_then_probe  # type: ignore[method-assign]
    oracle_replan.main()


if __name__ == "__main__":
    main()
