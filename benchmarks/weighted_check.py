"""Unequal per-rank batches give the full-batch update: DDP over NCCL (float64) and DeepSpeed ZeRO-2.

Run under torchrun on 2 GPUs (or gloo on CPU):
    torchrun --nproc_per_node=2 benchmarks/weighted_check.py --mode ddp --out ddp.json
    torchrun --nproc_per_node=2 benchmarks/weighted_check.py --mode deepspeed --out ds.json

Rank r takes n_r samples of one global batch (GlobalBatchSampler) in k_r micro-batches
of m_r, each micro-batch's mean loss scaled by loss_weight * m_r / n_r (DDP) or by
loss_weight (DeepSpeed, which itself divides by its accumulation steps). After one
optimizer step the parameters must equal a single process's full-batch step.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os

import torch
import torch.distributed as dist

from gpumix.agent.batch_split import GlobalBatchSampler, loss_weight, split_micro_batches

SPLIT = [3, 9]  # n_r, B = 12
MICRO = [1, 3]  # m_r: k = 3 on both (ZeRO-2 reduces every micro-step: k must match)
DATASET = 48


def build(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(dtype)


def data(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(DATASET, 8, generator=generator, dtype=dtype), torch.randn(DATASET, 3, generator=generator, dtype=dtype))


def reference(dtype: torch.dtype, lr: float) -> list[torch.Tensor]:
    """One SGD step on the whole global batch, in one process."""
    model = build(dtype)
    x, y = data(dtype)
    batch = next(GlobalBatchSampler(DATASET, [sum(SPLIT)], 0, seed=3).steps())
    torch.nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
    return [(p - lr * p.grad).detach() for p in model.parameters()]


def ddp_step(rank: int, device: torch.device, weighted: bool) -> list[torch.Tensor]:
    from torch.nn.parallel import DistributedDataParallel

    model = build(torch.float64).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    x, y = data(torch.float64)
    indices = next(GlobalBatchSampler(DATASET, SPLIT, rank, seed=3).steps())
    weight = loss_weight(SPLIT[rank], len(SPLIT), sum(SPLIT)) if weighted else 1.0
    micro_batches = list(split_micro_batches(indices, MICRO[rank]))
    for number, micro in enumerate(micro_batches):
        last = number == len(micro_batches) - 1
        with contextlib.nullcontext() if last else ddp.no_sync():
            loss = torch.nn.functional.mse_loss(ddp(x[micro].to(device)), y[micro].to(device))
            (loss * weight * len(micro) / SPLIT[rank]).backward()
    return [(p - 1.0 * p.grad).detach().cpu() for p in model.parameters()]


def deepspeed_step(rank: int, weighted: bool) -> list[torch.Tensor]:
    import deepspeed

    micro, steps = MICRO[rank], SPLIT[rank] // MICRO[rank]
    config = {  # per rank: its own micro-batch and accumulation steps
        "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": steps,
        "train_batch_size": micro * steps * dist.get_world_size(),
        "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
        "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True, "steps_per_print": 10**9,
    }
    model = build(torch.float32)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    x, y = data(torch.float32)
    indices = next(GlobalBatchSampler(DATASET, SPLIT, rank, seed=3).steps())
    weight = loss_weight(SPLIT[rank], len(SPLIT), sum(SPLIT)) if weighted else 1.0
    for batch in split_micro_batches(indices, micro):
        loss = torch.nn.functional.mse_loss(engine(x[batch].to(engine.device)), y[batch].to(engine.device))
        engine.backward(loss * weight)  # DeepSpeed divides by its accumulation steps itself
        engine.step()
    return [p.detach().float().cpu() for p in engine.module.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ddp", "deepspeed"), default="ddp")
    parser.add_argument("--out")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    result = {"mode": args.mode, "backend": dist.get_backend(), "split": SPLIT, "micro": MICRO}
    for weighted in (True, False):
        if args.mode == "ddp":
            after, expected = ddp_step(rank, device, weighted), reference(torch.float64, 1.0)
        else:
            after, expected = deepspeed_step(rank, weighted), reference(torch.float32, 1.0)
        diff = max(float((a - e).abs().max()) for a, e in zip(after, expected, strict=True))
        result["max_abs_diff_weighted" if weighted else "max_abs_diff_unweighted"] = diff
        dist.barrier()  # both ranks done with this model before the next one's set-up broadcast
    dist.barrier()  # every rank done with its collectives before anyone tears the group down
    if rank == 0:
        text = json.dumps(result)
        print(text)
        if args.out:
            with open(args.out, "w") as out:
                out.write(text)
    # DDP and DeepSpeed's engine sit in reference cycles that hold the group: collected at exit instead, they
    # tear it down while gloo's threads run, which aborts a rank (SIGABRT: a full local run at 5a97e06; session
    # 17 found the same in tests/test_weighted_gradients.py)
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
