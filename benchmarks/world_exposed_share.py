"""The simulated world's exposed communication at the demo's equal split (64 samples a rank) on each
shipped rig: the all-reduce, the slowest rank's compute, the wait after it and its share of the step.
Deterministic (the world's mean step). Before/after a change to the world: run it on each tree.

    PYTHONPATH=/tmp/tree .venv/bin/python benchmarks/world_exposed_share.py --label before --out X.json
"""

from __future__ import annotations

import argparse
import json

from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig
from gpumix.sim.world import World

SAMPLES_PER_RANK = 64  # gpumix/demo/launch.py: the equal split a user starts with


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rigs = {}
    for name in sorted(BUILTIN_RIGS):
        world = World(load_builtin_rig(name))
        timing = world.mean_step([SAMPLES_PER_RANK] * len(world.rig.gpus))
        rigs[name] = {"allreduce_s": timing.allreduce_s, "slowest_compute_s": max(timing.compute_s),
                      "comm_wait_s": timing.comm_wait_s, "step_s": timing.step_s,
                      "exposed_share": timing.comm_wait_s / timing.step_s}
    result = {"label": args.label, "samples_per_rank": SAMPLES_PER_RANK, "rigs": rigs}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
