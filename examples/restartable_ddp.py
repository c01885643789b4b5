"""A DDP job that `gpumix run` can re-plan and restart without losing progress.

    gpumix run --job demo-ddp -- torchrun --nproc_per_node=3 examples/restartable_ddp.py --steps 200
    # then, in gpumix-top, press `s` (re-plan), or: gpumix plan --job demo-ddp --apply

What makes it restartable: the global-batch sampler (every rank takes its
n_r samples of each global batch, reproducibly, and resumes at the epoch and
step that the run's total step count reaches), the loss weight n_r*R/B
(so unequal shares give the full-batch gradient), a checkpoint hook, and a
restart point after each optimizer step. Runs on CPU (gloo) and GPUs (NCCL).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gpumix.agent
from gpumix.agent.batch_split import GlobalBatchSampler, loss_weight, split_micro_batches
from gpumix.agent.ddp import compute_apart, watch_ddp
from gpumix.agent.probe_schedule import probe_micro_batch, probe_steps, requested_probe_steps
from gpumix.wire.plan_file import RunPlan


def build_model(hidden: int, layers: int) -> torch.nn.Sequential:
    """An MLP 16 -> hidden (x layers) -> 4, the same on every rank (seeded)."""
    torch.manual_seed(0)
    parts: list[torch.nn.Module] = [torch.nn.Linear(16, hidden), torch.nn.Tanh()]
    for _ in range(layers - 1):
        parts += [torch.nn.Linear(hidden, hidden), torch.nn.Tanh()]
    return torch.nn.Sequential(*parts, torch.nn.Linear(hidden, 4))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps in all, over as many epochs as they take")
    parser.add_argument("--samples-per-rank", type=int, default=8, help="the equal split when no plan is given")
    parser.add_argument("--dataset", type=int, default=100_000)
    parser.add_argument("--checkpoint", default="checkpoint.pt")
    parser.add_argument("--trace", help="a folder for per-rank logs of steps, losses and sample indices")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="slow each step down (tests)")
    parser.add_argument("--final", help="rank 0 writes the final parameters here")
    parser.add_argument("--hidden", type=int, default=32, help="hidden width (4096+ makes a GPU work)")
    parser.add_argument("--layers", type=int, default=1, help="hidden layers")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--stair-probe", type=int, default=0, metavar="GRANULARITY",
                        help="a first launch runs a stair probe first: counts +-1 and +-2 granules of this size"
                             " (gpumix.agent.probe_schedule); 0: none unless `gpumix run --stair-probe` asks")
    parser.add_argument("--slow-rank", type=int, help="this rank computes slower, as a weaker GPU would (tests)")
    parser.add_argument("--slow-s-per-sample", type=float, default=0.0, help="the slow rank's extra seconds per sample")
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    train(args, cuda, local_rank)
    # DDP sits in reference cycles and holds the process group: collect it now, with every rank still
    # running, so the group is not torn down while the interpreter exits (see examples/ddp_train.py).
    gc.collect()
    dist.destroy_process_group()


def train(args: argparse.Namespace, cuda: bool, local_rank: int) -> None:
    """The whole run on this rank, from the plan and the checkpoint to the last step or a restart point."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype)

    agent = gpumix.agent.start()
    plan = agent.plan or RunPlan.equal(world, args.samples_per_rank)
    share = plan.share(rank)
    agent.micro_batch, agent.accumulation_steps = share.micro_batch, share.accumulation_steps

    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(args.dataset, 16, generator=generator, dtype=dtype)
    targets = inputs @ torch.randn(16, 4, generator=generator, dtype=dtype) + 0.1 * torch.randn(args.dataset, 4, generator=generator, dtype=dtype)

    model = build_model(args.hidden, args.layers).to(device, dtype)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    watch_ddp(agent, ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    start = agent.resume_step
    if start:
        state = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        assert state["step"] == start, (state["step"], start)

    def save(steps_done: int) -> None:
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": steps_done},
                       args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)

    agent.on_checkpoint(save)
    log = open(Path(args.trace) / f"rank{rank}.jsonl", "a") if args.trace else None

    def train_step(indices: list[int], probing: bool) -> float:
        """One optimizer step over this rank's share of a global batch; its mean loss. `probing`: a stair
        probe's step (every rank's): its compute timed apart from the all-reduce (compute_apart)."""
        with agent.step(samples=len(indices)) as record:
            optimizer.zero_grad(set_to_none=True)
            micro = share.micro_batch
            if probing:  # a probe's count: in one pass where the memory allows, else in even passes
                peak_bytes, gpu_bytes = (torch.cuda.max_memory_allocated(device),
                                         torch.cuda.get_device_properties(device).total_memory) if cuda else (None, None)
                micro = probe_micro_batch(len(indices), share.micro_batch, peak_bytes, gpu_bytes)
            micro_batches = list(split_micro_batches(indices, micro))
            if probing:  # the passes this step ran, not the split's the agent holds: the hub's point says them
                record.micro_batch, record.accumulation_steps = micro, len(micro_batches)
            with compute_apart(ddp, record) if probing else contextlib.nullcontext():
                total = passes(micro_batches, len(indices))
            optimizer.step()
            record.loss = total
        return total

    def passes(micro_batches: list[list[int]], samples: int) -> float:
        """The step's forwards and backwards; its mean loss."""
        total = 0.0
        for number, micro in enumerate(micro_batches):
            x, y = inputs[micro].to(device), targets[micro].to(device)
            # each micro-batch's mean loss, weighted so the update is the full global batch's: its
            # samples x R / B (batch_split.loss_weight over this step's own count, as a probe's steps differ)
            weight = loss_weight(len(micro), world, plan.global_batch)
            last = number == len(micro_batches) - 1
            with contextlib.nullcontext() if last else ddp.no_sync():  # one all-reduce per step
                if rank == args.slow_rank:
                    time.sleep(args.slow_s_per_sample * len(micro))
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                (loss * weight).backward()
            total += loss.item() * len(micro) / samples
        return total

    # resume_step counts optimizer steps over the whole run: the sampler turns it into the epoch
    # and the step within it (the global batch never changes across restarts)
    # a first launch with --stair-probe, or under `gpumix run --stair-probe`, runs the probe's steps first
    if start:
        probe: list[list[int]] = []
    elif args.stair_probe:
        probe = probe_steps(plan.samples_per_rank, args.stair_probe)
    else:
        probe = requested_probe_steps(plan.samples_per_rank)
    sampler = GlobalBatchSampler.resumed(args.dataset, plan.samples_per_rank, rank, start, seed=7, step_splits=probe)
    done = start
    for step, indices in sampler.run_steps(args.steps):  # epoch after epoch
        total = train_step(indices, sampler.probing(step))
        if log:
            log.write(json.dumps({"step": step, "epoch": sampler.epoch, "loss": total, "indices": indices,
                                  "plan": plan.plan_id}) + "\n")
            log.flush()
        time.sleep(args.step_sleep)
        done = step + 1
        if agent.restart_point(done):
            break
    if args.final and rank == 0 and done >= args.steps:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.final)
    gpumix.agent.stop()


if __name__ == "__main__":
    main()
