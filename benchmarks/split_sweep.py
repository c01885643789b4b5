"""Measure every split of one global batch over 2 GPUs: the reachable best, found by trying.

The re-plan benchmark needs to know what the best split of the batch really reaches
on a slowed pair, not what a model says. This runs one DDP job (the same MLP and
data path as examples/restartable_ddp.py) and, without restarting, walks through
splits n_0 = B/2 .. of the global batch B, each for --steps timed steps. Per split:
the median step time (so samples/s), and each rank's compute alone for its share
(forward + backward under no_sync, synchronized), median of --isolated passes.
Phases: `free`, then `slowed` with a bf16 matmul loop competing on GPU 1.

    torchrun --standalone --nproc_per_node=2 benchmarks/split_sweep.py --out sweep.json
Reads nothing from NVML and changes no GPU setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from competitor import COMPETITOR  # benchmarks/ is on sys.path for a script there
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
from restartable_ddp import build_model  # noqa: E402  the job the re-plan benchmark runs: one model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--shares", default="0.5,0.55,0.6,0.625,0.65,0.675,0.7,0.725,0.75,0.8",
                        help="rank 0's share of the global batch, one split each")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--isolated", type=int, default=5)
    parser.add_argument("--phases", default="free,slowed")
    parser.add_argument("--out")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "two ranks: one per GPU"
    device = torch.device("cuda", local_rank)
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(200_000, 16, generator=generator)
    targets = torch.randn(200_000, 4, generator=generator)
    model = build_model(args.hidden, args.layers).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9)
    B = args.global_batch
    rows = torch.Generator().manual_seed(rank)

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.randint(0, inputs.shape[0], (n,), generator=rows)
        return inputs[index].to(device), targets[index].to(device)

    def step(n: int, weight: float) -> None:
        optimizer.zero_grad(set_to_none=True)
        x, y = batch(n)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        (loss * weight).backward()
        optimizer.step()
        loss.item()

    def isolated(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with ddp.no_sync():
            x, y = batch(n)
            torch.nn.functional.mse_loss(ddp(x), y).backward()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    result: dict = {"hidden": args.hidden, "layers": args.layers, "global_batch": B,
                    "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                    "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
                    "phases": {}}
    competitor = None
    try:
        for phase in args.phases.split(","):
            if phase == "slowed" and rank == 0:
                competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR.format(gpu=1, seconds=900)])
                time.sleep(6)
            dist.barrier()
            rows_out = []
            for share in (float(s) for s in args.shares.split(",")):
                n0 = round(B * share)
                counts = [n0, B - n0]
                mine, weight = counts[rank], counts[rank] * world / B
                for _ in range(5):
                    step(mine, weight)
                times = []
                for _ in range(args.steps):
                    torch.cuda.synchronize()
                    dist.barrier()
                    start = time.perf_counter()
                    step(mine, weight)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - start)
                compute = statistics.median(isolated(mine) for _ in range(args.isolated))
                gathered: list = [None] * world
                dist.all_gather_object(gathered, {"step_s": statistics.median(times), "compute_s": compute})
                step_s = max(g["step_s"] for g in gathered)
                rows_out.append({"samples": counts, "step_s": step_s, "samples_per_s": B / step_s,
                                 "compute_s": [g["compute_s"] for g in gathered]})
                if rank == 0:
                    print(phase, counts, f"{B / step_s:.0f} samples/s",
                          [f"{g['compute_s'] * 1e3:.1f} ms" for g in gathered], flush=True)
            best = max(rows_out, key=lambda r: r["samples_per_s"])
            result["phases"][phase] = {"splits": rows_out, "best": best}
    finally:
        if competitor is not None:
            competitor.kill()
    if rank == 0 and args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
