"""Each auto re-plan look of chosen oracle rigs, with what the world says of its offer (issue 16).

`oracle_replan.py` records a kept look's predicted speedup only. This replays rigs the same way (its
`bench_rig`, the product's `AutoReplan`) and, at each look, runs the offer in the world too: the world's
mean step of the split running now over the offer's, beside the planner's predicted speedup. A kept offer
whose world speedup clears the bar is a gain the bar held back; one under 1.0 would have cost a restart.

    python benchmarks/oracle_offer_check.py --rig 4:139:22 --rig 16:179:0 --out benchmarks/results/oracle_offers_DATE.json

--rig GRANULARITY:SEED:RIG is a generated rig (its number in the set `--seed SEED --no-shipped` makes)."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle_replan  # noqa: E402  (the harness, beside this script)

from gpumix.plan.split_types import Plan  # noqa: E402
from gpumix.run import auto_replan  # noqa: E402
from gpumix.sim.world import World  # noqa: E402


def replay(granularity: int, seed: int, number: int) -> dict[str, Any]:
    """The rig's run as oracle_replan runs it, each look's offer measured in the world."""
    oracle_replan.GRANULARITY = granularity
    rng = random.Random(seed)
    for made in range(number + 1):
        rig, per_rank = oracle_replan.generated_rig(rng, made)
    world = World(rig)
    stock: list[float | None] = [None] * len(rig.gpus)
    running: dict[str, float] = {}
    looks: list[dict[str, Any]] = []
    run_split, bar_of = oracle_replan.Job.run, auto_replan.AutoReplan.bar

    def run(job: oracle_replan.Job, counts: list[int], micro: list[int], caps: list[float | None]) -> Any:
        running["step_s"] = oracle_replan.step_s(world, counts, stock, micro)
        return run_split(job, counts, micro, caps)

    def bar(auto: auto_replan.AutoReplan, plan: Plan) -> float:
        asked = bar_of(auto, plan)
        counts = [r.samples for r in plan.ranks]
        offer_s = oracle_replan.step_s(world, counts, stock, [r.micro_batch for r in plan.ranks])
        looks.append({"counts": counts, "predicted_speedup": plan.speedup, "world_speedup": running["step_s"] / offer_s,
                      "bar": asked, "kept_current": plan.kept_current, "interpolated": plan.interpolated,
                      "restarted": bool(not plan.kept_current and plan.speedup >= asked)})
        return asked

    oracle_replan.Job.run, auto_replan.AutoReplan.bar = run, bar  # type: ignore[method-assign]
    try:
        result = oracle_replan.bench_rig(rig, per_rank, None)
    finally:
        oracle_replan.Job.run, auto_replan.AutoReplan.bar = run_split, bar_of  # type: ignore[method-assign]
    return {"granularity": granularity, "seed": seed, "rig": result["rig"], "gpus": result["gpus"],
            "oracle_counts": result["oracle"]["counts"], "oracle_gain": result["oracle_gain"],
            "final_counts": result["final_counts"], "gain_share_of_oracle": result["gain_share_of_oracle"],
            "restarts": result["restarts"], "looks": looks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rig", action="append", required=True, metavar="GRANULARITY:SEED:RIG")
    parser.add_argument("--out")
    args = parser.parse_args()
    rigs = []
    for spec in args.rig:
        try:
            granularity, seed, number = (int(part) for part in spec.split(":"))
        except ValueError:
            parser.error(f"--rig {spec!r}: GRANULARITY:SEED:RIG, three integers")
        found = replay(granularity, seed, number)
        rigs.append(found)
        for look in found["looks"]:
            print(f"g{granularity} seed {seed} {found['rig']}: predicted {look['predicted_speedup']:.4f}x, world "
                  f"{look['world_speedup']:.4f}x, bar {look['bar']:.2f}x, {'restarted' if look['restarted'] else 'kept'}")
    if args.out:
        command = "python benchmarks/oracle_offer_check.py " + " ".join(f"--rig {spec}" for spec in args.rig)
        Path(args.out).write_text(json.dumps({"command": command, "rigs": rigs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
