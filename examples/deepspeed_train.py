"""DeepSpeed with the gpumix agent: micro-batch, accumulation and all-reduce time.

    deepspeed --num_gpus 2 examples/deepspeed_train.py --zero 2
    torchrun --nproc_per_node=2 examples/deepspeed_train.py       # CPU: gloo

Under `gpumix run`, a plan made with `gpumix plan --deepspeed-config BASE.json --apply`
hands each rank its own config (its micro-batch m_r, the common accumulation steps k):
the rank starts DeepSpeed with that file, and watch_deepspeed makes DeepSpeed count the
plan's global batch per step.

A stair probe (`gpumix run --stair-probe`, or `--stair-probe GRANULARITY` here) runs the first steps
at counts traded between ranks (gpumix.agent.probe_schedule), in the same k micro-batches: DeepSpeed
steps at each k-th micro-batch, whatever its size, so a probe changes the micro-batches, never k. Each
micro-batch's mean loss weighs its samples x k x R / B (DeepSpeed divides by k itself): every step is
its global batch's update, the probe's too.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import deepspeed
import torch

import gpumix.agent
from gpumix.agent.batch_split import GlobalBatchSampler, loss_weight, split_accumulation
from gpumix.agent.integrations.deepspeed import watch_deepspeed
from gpumix.agent.probe_schedule import probe_granule, probe_steps, requested_probe_steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--zero", type=int, default=0, help="ZeRO stage (0-3; gloo on CPU runs each)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--local_rank", type=int, default=-1)  # set by the deepspeed launcher
    parser.add_argument("--samples-out", help="a folder: each rank writes DeepSpeed's sample count there (tests)")
    parser.add_argument("--checkpoint", help="a folder: restartable under `gpumix run` (DeepSpeed checkpoints there)")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    parser.add_argument("--dataset", type=int, default=4096, help="samples of the synthetic dataset")
    parser.add_argument("--stair-probe", type=int, default=0, metavar="GRANULARITY",
                        help="a first launch runs a stair probe first (rounded up to a multiple of k);"
                             " 0: none unless `gpumix run --stair-probe` asks")
    parser.add_argument("--final", help="rank 0 writes the final parameters here (tests)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
    torch.manual_seed(0)  # the same start on every run (DeepSpeed broadcasts rank 0's parameters)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    config = {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": args.accumulation,
        "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
        "zero_optimization": {"stage": args.zero},
        "zero_allow_untested_optimizer": True,  # plain SGD under ZeRO: fine for an example
        "wall_clock_breakdown": True,  # DeepSpeed's timers: gives the all-reduce time
        "steps_per_print": 10**9,
    }
    agent = gpumix.agent.start(job="deepspeed-example")
    rank = torch.distributed.get_rank()
    planned = agent.plan.deepspeed_config(rank) if agent.plan is not None else None
    if planned is not None:  # this rank's config from the plan: its m_r, the common k
        config = json.loads(Path(planned).read_text())
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    watch_deepspeed(agent, engine)  # counts the plan's global batch per step, when there is a plan
    micro_batch, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    world = torch.distributed.get_world_size()
    samples_per_rank = agent.plan.samples_per_rank if agent.plan is not None else [micro_batch * accumulation] * world
    global_batch = sum(samples_per_rank)
    start = 0
    if args.checkpoint:  # every rank saves and loads together: DeepSpeed's checkpoints are collective
        agent.on_checkpoint(lambda steps_done: engine.save_checkpoint(args.checkpoint, tag="restart"))
        if agent.resume_step:
            engine.load_checkpoint(args.checkpoint, tag="restart")
            start = agent.resume_step
    if start:  # a relaunch resumes and never probes again
        probe: list[list[int]] = []
    elif args.stair_probe:
        probe = probe_steps(samples_per_rank, probe_granule(args.stair_probe, accumulation))
    else:
        probe = requested_probe_steps(samples_per_rank, multiple_of=accumulation)
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(args.dataset, 256, generator=generator)
    labels = torch.randint(0, 10, (args.dataset,), generator=generator)
    sampler = GlobalBatchSampler.resumed(args.dataset, samples_per_rank, rank, start, seed=7, step_splits=probe)
    device = engine.device
    done = start
    for step, indices in sampler.run_steps(args.steps):  # epoch after epoch
        with agent.step(samples=len(indices)) as record:
            micro_batches = split_accumulation(indices, accumulation)
            if sampler.probing(step):  # the passes this step runs, not the config's: the hub's point says them
                record.micro_batch = len(micro_batches[0])
            for micro in micro_batches:
                loss = torch.nn.functional.cross_entropy(engine(inputs[micro].to(device)), labels[micro].to(device))
                engine.backward(loss * loss_weight(len(micro) * accumulation, world, global_batch))
                engine.step()
            record.loss = loss
        time.sleep(args.step_sleep)
        done = step + 1
        if args.checkpoint and agent.restart_point(done):
            break  # `gpumix run` relaunches under the new plan
    if args.final and done >= args.steps:  # every rank: ZeRO-3 gathers its partitioned parameters together
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            if rank == 0:
                torch.save({k: v.detach().float().cpu() for k, v in engine.module.state_dict().items()}, args.final)
    if args.samples_out:
        counts = {"global_samples": engine.global_samples, "global_steps": engine.global_steps}
        (Path(args.samples_out) / f"rank{rank}.json").write_text(json.dumps(counts))
    gpumix.agent.stop()


if __name__ == "__main__":
    main()
