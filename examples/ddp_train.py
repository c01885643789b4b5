"""DDP with the gpumix agent and its communication hook.

    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 100
    # a GeForce box without P2P: NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1 torchrun ...
    # with --nccl-probe, the agent reports which rank pairs NCCL connects through SHM (host memory)

Runs on CPU with gloo where there is no GPU (or with --device cpu); --backend picks the process
group's backend (default: nccl with CUDA, else gloo).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import gpumix.agent
from gpumix.agent import nccl_probe
from gpumix.agent.ddp import watch_ddp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--nccl-probe", action="store_true", help="report NCCL's transport per rank pair")
    parser.add_argument("--no-agent", action="store_true", help="the same job without gpumix (for overhead runs)")
    parser.add_argument("--warmup", type=int, default=10, help="steps before --timing-out starts its clock")
    parser.add_argument("--timing-out", metavar="FILE", help="rank 0 writes the seconds per step after warm-up")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="where the model runs (default: cuda when there is one)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with CUDA, else gloo")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    probe_log = nccl_probe.prepare() if args.nccl_probe and cuda else None  # before the process group
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(args.backend or ("nccl" if cuda else "gloo"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(), torch.nn.Linear(args.width, 10),
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    agent = None if args.no_agent else gpumix.agent.start(job="ddp-example")
    if agent is not None:
        watch_ddp(agent, ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator(device="cpu").manual_seed(dist.get_rank())
    started = None
    for index in range(args.steps):
        if index == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            started = time.perf_counter()
        inputs = torch.randn(args.batch, args.width, generator=generator).to(device, non_blocking=True)
        labels = torch.randint(0, 10, (args.batch,), generator=generator).to(device, non_blocking=True)
        record = agent.step_begin(samples=args.batch) if agent else None
        loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if agent is not None and record is not None:
            agent.step_end(record, loss=loss, lr=optimizer.param_groups[0]["lr"])
        if probe_log is not None and index == 1 and agent is not None:
            nccl_probe.report(agent, probe_log)  # the communicator exists after the first all-reduce
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / (args.steps - args.warmup) if started is not None else None
    gpumix.agent.stop()  # sends what is queued: the counts below are final
    if args.timing_out and dist.get_rank() == 0 and seconds is not None:
        timing = {"seconds_per_step": seconds, "steps": args.steps - args.warmup, "agent": not args.no_agent,
                  "device": device.type, "backend": dist.get_backend(),
                  "agent_connects": agent.sender.connects if agent else None, "agent_sent": agent.sender.sent if agent else None}
        with open(args.timing_out, "w") as out:
            json.dump(timing, out)
    # DDP's reducer holds the process group: drop it first, so that the group is torn down here, with every
    # rank still running, not while the interpreter exits (a rank of a two-rank gloo run aborted there once,
    # "terminate called without an active exception", in about 110 runs on the loaded 2-core CI box). The
    # agent let go of its probes at stop(); its comm hook and the model still refer to each other: collect.
    del ddp, optimizer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
