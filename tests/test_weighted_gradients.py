"""Unequal samples per rank under real DDP (gloo, 3 CPU ranks): the loss weight makes every
rank's gradient the full-batch gradient; without it, it is not. And the sampler resumes."""

from __future__ import annotations

import gc
import socket
from pathlib import Path

import pytest

from gpumix.agent.batch_split import GlobalBatchSampler, loss_weight, split_micro_batches

SPLIT = [2, 4, 6]  # n_r, B = 12
MICRO = [1, 2, 3]  # m_r: k_r = 2 micro-batches each
DATASET_LEN = 30
SEED = 5


def data(torch):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(DATASET_LEN, 8, generator=generator, dtype=torch.float64)
    y = torch.randn(DATASET_LEN, 3, generator=generator, dtype=torch.float64)
    return x, y


def model(torch):
    torch.manual_seed(1)
    return torch.nn.Linear(8, 3).double()


def grads(module) -> list:
    return [p.grad.detach().clone() for p in module.parameters()]


def train_and_save(rank: int, out: str) -> None:
    """Three DDP runs of one step; each one's gradients go to out/rank{rank}.pt."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    x, y = data(torch)
    indices = next(GlobalBatchSampler(DATASET_LEN, SPLIT, rank, seed=SEED).steps())
    weight = loss_weight(SPLIT[rank], len(SPLIT), sum(SPLIT))
    results = {}
    for name, scale in (("weighted", weight), ("plain", 1.0)):
        ddp = DistributedDataParallel(model(torch))
        loss = torch.nn.functional.mse_loss(ddp(x[indices]), y[indices]) * scale
        loss.backward()
        results[name] = grads(ddp.module)
    ddp = DistributedDataParallel(model(torch))
    micro_batches = list(split_micro_batches(indices, MICRO[rank]))
    for i, micro in enumerate(micro_batches):
        loss = torch.nn.functional.mse_loss(ddp(x[micro]), y[micro])
        loss = loss * weight * len(micro) / SPLIT[rank]
        if i < len(micro_batches) - 1:
            with ddp.no_sync():  # accumulate locally, all-reduce once at the last
                loss.backward()
        else:
            loss.backward()
    results["accumulated"] = grads(ddp.module)
    torch.save(results, Path(out) / f"rank{rank}.pt")


def worker(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=len(SPLIT))
    try:
        train_and_save(rank, out)
    finally:
        # The DDP objects hold the process group and sit in reference cycles: collect them here, so
        # the group is torn down now and not while the interpreter exits, where a rank once aborted
        # ("terminate called without an active exception", CI of session 16). As examples/ddp_train.py.
        gc.collect()
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_loss_weight_gives_full_batch_gradient_on_every_rank(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(free_port(), str(tmp_path)), nprocs=len(SPLIT), join=True)

    x, y = data(torch)
    single = model(torch)
    batch = [i for r in range(len(SPLIT))
             for i in next(GlobalBatchSampler(DATASET_LEN, SPLIT, r, seed=SEED).steps())]
    assert sorted(batch) == sorted(set(batch)) and len(batch) == 12
    torch.nn.functional.mse_loss(single(x[batch]), y[batch]).backward()
    expected = grads(single)

    for rank in range(len(SPLIT)):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for name in ("weighted", "accumulated"):
            for g, e in zip(got[name], expected, strict=True):
                assert torch.allclose(g, e, atol=1e-6, rtol=0), (rank, name)
        # Plain DDP averages per-rank means: samples on small ranks weigh more. Not the same.
        assert max((g - e).abs().max().item() for g, e in zip(got["plain"], expected, strict=True)) > 1e-3


def test_sampler_restart_with_another_split_resumes_without_duplicates() -> None:
    dataset_len, stop_at = 100, 3
    first_split, second_split = [2, 4, 6], [8, 4]  # B = 12 both, another world size
    seen = []
    for rank in range(len(first_split)):
        sampler = GlobalBatchSampler(dataset_len, first_split, rank, seed=SEED, epoch=2)
        seen += [i for step, ids in enumerate(sampler.steps()) if step < stop_at for i in ids]
    for rank in range(len(second_split)):
        sampler = GlobalBatchSampler(dataset_len, second_split, rank, seed=SEED, epoch=2,
                                     start_step=stop_at)
        sampler.set_epoch(2)  # the training loop's call for the resumed epoch keeps start_step
        assert len(sampler) == (100 // 12 - stop_at) * second_split[rank]
        seen += list(sampler)
    assert len(seen) == len(set(seen)) == 100 // 12 * 12  # the last partial batch is dropped
    # Continues where it stopped: the same global batches as an uninterrupted epoch.
    whole = GlobalBatchSampler(dataset_len, [12], 0, seed=SEED, epoch=2)
    steps = list(whole.steps())
    resumed = GlobalBatchSampler(dataset_len, second_split, 0, seed=SEED, epoch=2, start_step=stop_at)
    assert next(resumed.steps()) == steps[stop_at][:8]
    assert set(seen) == {i for ids in steps for i in ids}


def test_sampler_epochs_and_micro_batches() -> None:
    sampler = GlobalBatchSampler(50, [3, 5], 1, seed=0, epoch=0, start_step=2)
    assert len(sampler) == (50 // 8 - 2) * 5
    sampler.set_epoch(1)  # a new epoch starts from its first step
    assert sampler.start_step == 0 and len(sampler) == 6 * 5
    assert list(sampler) != list(GlobalBatchSampler(50, [3, 5], 1, seed=0, epoch=0))
    assert list(split_micro_batches([1, 2, 3, 4, 5, 6], 2)) == [[1, 2], [3, 4], [5, 6]]
    assert list(split_micro_batches([1, 2, 3], 2)) == [[1, 2], [3]]
    assert loss_weight(6, 3, 12) == 1.5


def test_resumed_from_the_run_total_continues_across_epochs() -> None:
    """agent.resume_step counts steps over the whole run; resumed() finds the epoch and the step in
    it. Stopping at 5, 13 (epoch 1) and 19 (epoch 2) under other splits of B = 12 trains exactly the
    global batches of an uninterrupted run, every sample once per epoch."""
    dataset_len, global_batch, total_steps = 100, 12, 3 * (100 // 12)
    whole = []
    for epoch in range(3):
        whole += list(GlobalBatchSampler(dataset_len, [global_batch], 0, seed=SEED, epoch=epoch).steps())
    splits = [[2, 4, 6], [8, 4], [1, 1, 10], [12]]
    stops = [0, 5, 13, 19, total_steps]
    trained = []
    for split, start, stop in zip(splits, stops, stops[1:], strict=False):
        samplers = [GlobalBatchSampler.resumed(dataset_len, split, rank, start, seed=SEED) for rank in range(len(split))]
        steps = []
        for ranks in zip(*(sampler.run_steps(stop) for sampler in samplers), strict=True):  # the examples' loop
            steps.append({step for step, _ in ranks})
            trained.append(sorted(i for _, part in ranks for i in part))
        assert steps == [{step} for step in range(start, stop)]  # every rank at the same step of the run
    assert trained == [sorted(batch) for batch in whole]
    assert GlobalBatchSampler.resumed(dataset_len, [8, 4], 1, 19, seed=SEED).steps_done == 19


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_a_rank_with_no_samples_is_refused_by_the_sampler(rank: int) -> None:
    # A rank at n_r = 0 would join no step (the others hang in the all-reduce) or an empty one
    # (DDP fails on it): it is left out of the job by the plan instead.
    with pytest.raises(ValueError, match="every rank needs at least 1 sample per step"):
        GlobalBatchSampler(100, [8, 0, 4], rank)
