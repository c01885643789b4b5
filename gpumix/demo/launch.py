"""The demo job's launcher, run under `gpumix run` like torchrun would be.

    python -m gpumix.demo.launch --rig mixed-10 --hub SOCKET

Starts one rank process per simulated GPU (light: no torch), each with the
real agent. Each rank's step follows the job model for its card, its share
of the batch (the plan, GPUMIX_PLAN) and its power cap (read from the hub,
so a cap change shows in the step time). Ranks take part in the restart
protocol exactly like a training script: they checkpoint their step at the
agreed stop and exit, and the supervisor relaunches them under the new plan.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import time

from gpumix.hub.client import HubClient
from gpumix.sim.rig import BUILTIN_RIGS, load_builtin_rig, load_rig
from gpumix.sim.world import World
from gpumix.wire.plan_file import RunPlan, load_plan

SAMPLES_PER_RANK = 64  # the equal split a user starts with
PACE_PERIOD_S = 1.0
ORPHAN_AFTER_POLLS = 5  # seconds without a hub before the demo ends itself


def pace(world: World, samples: list[int], caps_w: dict[str, float],
         micro_batches: list[int | None] | None = None) -> list[float]:
    """The world's mean compute seconds per GPU of the rig (samples per GPU, 0 where no rank runs),
    then the all-reduce seconds the step waits for (the shared array's layout). Each rank adds its
    own seeded noise and loader stalls (world.step)."""
    timing = world.mean_step(samples, [caps_w.get(gpu.uuid) for gpu in world.rig.gpus], micro_batches)
    return [*timing.compute_s, timing.comm_wait_s]


def main() -> None:
    parser = argparse.ArgumentParser(prog="gpumix.demo.launch")
    parser.add_argument("--rig", default="mixed-10", help="a shipped rig name or a rig file")
    parser.add_argument("--hub", required=True)
    args = parser.parse_args()
    rig = load_builtin_rig(args.rig) if args.rig in BUILTIN_RIGS else load_rig(args.rig)
    physics = World(rig)
    plan_path = os.environ.get("GPUMIX_PLAN")
    plan = load_plan(plan_path) if plan_path else RunPlan.equal(len(rig.gpus), SAMPLES_PER_RANK)
    world = len(plan.shares)  # a plan may leave GPUs out: it names the ones it keeps
    uuids = [gpu.uuid for gpu in rig.gpus]
    gpu_of_rank = [uuids.index(uuid) for uuid in plan.gpus] if plan.gpus else list(range(world))
    samples = [0] * len(rig.gpus)
    micro: list[int | None] = [None] * len(rig.gpus)  # accumulation: k passes of m samples
    for rank, index in enumerate(gpu_of_rank):
        samples[index], micro[index] = plan.share(rank).samples, plan.share(rank).micro_batch

    from gpumix.demo.rank import run_rank

    context = multiprocessing.get_context("spawn")
    shared_pace = context.Array("d", pace(physics, samples, {}, micro), lock=False)
    barrier = context.Barrier(world)
    stop = context.Event()
    ranks = [
        context.Process(target=run_rank, name=f"gpumix-demo-rank{rank}", daemon=True,
                        args=(rank, world, gpu_of_rank[rank], rig.gpus[gpu_of_rank[rank]].uuid, args.hub,
                              plan.share(rank), shared_pace, barrier, stop, rig.seed))
        for rank in range(world)
    ]
    for process in ranks:
        process.start()
    client = HubClient(args.hub)
    # `gpumix run` stops the job with SIGTERM: leave through the cleanup below
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent = os.getppid()
    missed = 0
    try:
        while any(process.is_alive() for process in ranks) and not stop.is_set():
            snapshot = client.snapshot()
            if snapshot is not None:  # power caps set in the TUI change the pace
                caps = {gpu["uuid"]: gpu["power_cap_w"] for gpu in snapshot["gpus"] if gpu["power_cap_w"]}
                shared_pace[:] = pace(physics, samples, caps, micro)
            missed = 0 if snapshot is not None else missed + 1
            if os.getppid() != parent or missed >= ORPHAN_AFTER_POLLS:
                break  # the supervisor or the hub is gone: a demo must not outlive them
            time.sleep(PACE_PERIOD_S)
    except KeyboardInterrupt:
        pass
    finally:
        # No barrier.abort(): a rank killed inside barrier.wait() may hold the barrier's lock
        # (`gpumix run` stops the whole process group), and abort() would then wait forever.
        stop.set()
        for process in ranks:
            process.join(timeout=1)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1)
    failed = [p.exitcode for p in ranks if p.exitcode not in (0, None)]
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
