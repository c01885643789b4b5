"""Issue 16 (a): after a restart whose measured step missed its prediction, would a lower re-plan
threshold pay? For each rig of a set, the planner end to end as oracle_replan.py runs it (restart
into a plan predicted >= AutoReplan.min_speedup faster), and after each restart one look past that
threshold: the miss of the restart's prediction, the next plan's predicted speedup, and the world's
gain of that next plan (taken here only to measure it; the product takes it only above its threshold).

    python benchmarks/replan_after_miss.py --seed 16 --out benchmarks/results/replan_after_miss_g4_seed16_s8_2026-12-02.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import oracle_replan as bench  # noqa: E402

from gpumix.plan.inputs import plan_from_snapshot  # noqa: E402


def looks(rig: Any, per_rank: int, granularity: int) -> list[dict[str, Any]]:
    world = bench.World(rig)
    stock: list[float | None] = [None] * len(rig.gpus)
    counts, micro = bench.equal_split(rig, per_rank)
    equal_s = world.mean_step(counts, stock, micro).step_s
    oracle_gain = equal_s / bench.oracle_split(world, sum(counts), stock)["step_s"] - 1
    job = bench.Job.start(rig)
    job.run(counts, micro, stock)
    rows: list[dict[str, Any]] = []
    miss, restarts = None, 0
    while True:
        _, plan = plan_from_snapshot(job.hub.snapshot(), "bench", granularity=granularity)
        new = [r.samples for r in plan.ranks]
        new_micro = [r.micro_batch for r in plan.ranks]
        now_s = world.mean_step(counts, stock, micro).step_s
        rows.append({"rig": rig.name, "restarts": restarts, "miss_of_last_prediction": miss,
                     "predicted_speedup": plan.speedup, "kept_current": plan.kept_current,
                     "world_gain": now_s / world.mean_step(new, stock, new_micro).step_s,
                     "oracle_gain": oracle_gain,
                     "share_now": (equal_s / now_s - 1) / oracle_gain if oracle_gain > 1e-9 else 1.0})
        below = plan.speedup < bench.POLICY.min_speedup
        if plan.kept_current or plan.speedup <= 1.0 or restarts >= bench.POLICY.max_restarts or (below and (miss is None or restarts >= 2)):
            return rows
        counts, micro = new, new_micro
        measured_s = job.run(counts, micro, stock)["measured_step_s"]
        miss = (measured_s - plan.proposed.step_time_s) / plan.proposed.step_time_s
        restarts += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=bench.SEED)
    parser.add_argument("--granularity", type=int, default=4)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    bench.GRANULARITY = args.granularity
    rng = random.Random(args.seed)
    rigs = [(bench.load_builtin_rig(name), 64) for name in bench.BUILTIN_RIGS] if args.seed == bench.SEED else []
    rigs += [bench.generated_rig(rng, number) for number in range(bench.GENERATED)]
    rows = [row for rig, per_rank in rigs for row in looks(rig, per_rank, args.granularity)]
    past = [r for r in rows if r["restarts"] >= 1 and not r["kept_current"] and r["predicted_speedup"] < bench.POLICY.min_speedup]
    Path(args.out).write_text(json.dumps({"command": " ".join(["python", *sys.argv]), "looks": rows,
                                          "below_threshold_after_a_restart": past}, indent=1))
    for r in past:
        print(f"{r['rig']} after {r['restarts']}: miss {r['miss_of_last_prediction']:+.3f}, next predicted"
              f" {r['predicted_speedup']:.4f}, world {r['world_gain']:.4f}, share now {r['share_now']:.3f}")


if __name__ == "__main__":
    main()
