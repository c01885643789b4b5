"""Unequal samples per rank, trained correctly: loss weights and a global-batch sampler.

DDP averages gradients over ranks, so a rank's mean loss over n_r samples
weighs each of its samples B / (R * n_r). Scaling that mean loss by
n_r * R / B (loss_weight) gives every sample of the global batch the same
weight 1 / B: the gradient of the full-batch mean loss (design.md section 6).
With k_r micro-batches of m_r samples, scale each micro-batch's mean loss by
loss_weight * m_r / n_r.

Standard library only; nothing here imports torch. GlobalBatchSampler has
the __iter__/__len__ a torch DataLoader asks of a sampler.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence


def loss_weight(n_r: int, ranks: int, global_batch: int) -> float:
    """The factor on rank r's mean loss: n_r * R / B."""
    return n_r * ranks / global_batch


class GlobalBatchSampler:
    """This rank's share of each global batch.

    Each optimizer step t of an epoch takes the global batch
    perm[t*B : (t+1)*B] of a permutation seeded by (seed, epoch), and rank r
    gets the contiguous slice starting at sum(n_q for q < r), n_r long. The
    global batches depend on seed, epoch, step and B only, never on the
    split: after a restart with another split (same B), start_step resumes
    exactly where the job stopped. The last partial global batch is dropped,
    as with drop_last: every step has exactly B samples, so the loss weights
    hold.

    Yields n_r indices per step; a DataLoader with batch_size=n_r (or m_r,
    for k_r micro-batches) groups them.

    `step_splits`: a stair probe's splits for the run's first steps
    (gpumix.agent.probe_schedule.probe_steps), each with the same global batch:
    those steps cut the same global batches at other places between the ranks,
    so every sample is still trained once an epoch. Their counts differ from
    n_r: iterate steps() and weigh each step by its own count
    (loss_weight(len(indices), R, B)).
    """

    def __init__(self, dataset_len: int, samples_per_rank: Sequence[int], rank: int,
                 seed: int = 0, epoch: int = 0, start_step: int = 0, shuffle: bool = True,
                 step_splits: Sequence[Sequence[int]] = ()) -> None:
        if not 0 <= rank < len(samples_per_rank):
            raise ValueError(f"rank {rank} is not in a split of {len(samples_per_rank)} ranks")
        if any(n < 1 for n in samples_per_rank):
            # a rank with no samples would still join every all-reduce with nothing to add, or
            # stop early and hang the others: leave it out of the job instead (a plan drops it)
            raise ValueError("every rank needs at least 1 sample per step; leave a rank out of the job, not"
                             " at 0 samples")
        if dataset_len < sum(samples_per_rank):
            raise ValueError(f"a dataset of {dataset_len} samples holds no global batch of {sum(samples_per_rank)}")
        for split in step_splits:
            if len(split) != len(samples_per_rank) or sum(split) != sum(samples_per_rank) or min(split) < 1:
                raise ValueError(f"a probe's split {list(split)[:16]} is not {len(samples_per_rank)} counts of at least 1"
                                 f" summing to the global batch of {sum(samples_per_rank)}")
        self.dataset_len = dataset_len
        self.samples_per_rank = list(samples_per_rank)
        self.step_splits = [list(split) for split in step_splits]
        self.rank = rank
        self.seed = seed
        self.epoch = epoch
        self.start_step = start_step  # optimizer steps of this epoch already done
        self.shuffle = shuffle

    @classmethod
    def resumed(cls, dataset_len: int, samples_per_rank: Sequence[int], rank: int, steps_done: int,
                seed: int = 0, shuffle: bool = True, step_splits: Sequence[Sequence[int]] = ()) -> GlobalBatchSampler:
        """The sampler positioned after `steps_done` optimizer steps counted over the whole run
        (agent.resume_step): the epoch they reached and the step within it. Exact as long as the
        global batch stays the same across restarts, which the supervisor enforces."""
        sampler = cls(dataset_len, samples_per_rank, rank, seed=seed, shuffle=shuffle, step_splits=step_splits)
        sampler.epoch, sampler.start_step = divmod(max(0, steps_done), sampler.steps_per_epoch)
        return sampler

    @property
    def global_batch(self) -> int:
        return sum(self.samples_per_rank)

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_len // self.global_batch

    @property
    def steps_done(self) -> int:
        """Optimizer steps of the whole run before this sampler's next step."""
        return self.epoch * self.steps_per_epoch + self.start_step

    def split_at(self, step: int) -> list[int]:
        """The split of this epoch's step: a probe's in the run's first steps (step_splits), else n_r's."""
        return self.step_splits[step] if self.epoch == 0 and step < len(self.step_splits) else self.samples_per_rank

    def probing(self, steps_done: int) -> bool:
        """Whether the run's step `steps_done` (counted over the whole run, as agent.resume_step) runs a
        probe's split (step_splits) rather than n_r: the same answer on every rank."""
        return self.split_at(steps_done - self.epoch * self.steps_per_epoch) != self.samples_per_rank

    def set_epoch(self, epoch: int) -> None:
        """A new epoch starts at step 0; setting the epoch being resumed keeps start_step."""
        if epoch != self.epoch:
            self.start_step = 0
        self.epoch = epoch

    def permutation(self) -> list[int]:
        order = list(range(self.dataset_len))
        if self.shuffle:
            # A string seed goes through SHA-512: the same order on every machine and run.
            random.Random(f"gpumix:{self.seed}:{self.epoch}").shuffle(order)
        return order

    def steps(self) -> Iterator[list[int]]:
        """This rank's indices, one list per remaining optimizer step."""
        order = self.permutation()
        for step in range(self.start_step, self.steps_per_epoch):
            split = self.split_at(step)
            first = step * self.global_batch + sum(split[: self.rank])
            yield order[first : first + split[self.rank]]

    def run_steps(self, total_steps: int) -> Iterator[tuple[int, list[int]]]:
        """The run's steps from steps_done (agent.resume_step, through resumed()) up to total_steps, epoch
        after epoch: (the step counted over the whole run, this rank's indices). The epoch turns are the
        part scripts got wrong (a total step passed as start_step ended the run after an epoch); break out
        at a restart point."""
        step = self.steps_done
        while step < total_steps:
            for indices in self.steps():
                if step >= total_steps:
                    return
                yield step, indices
                step += 1
            self.set_epoch(self.epoch + 1)  # the next epoch, from its step 0

    def __iter__(self) -> Iterator[int]:
        for indices in self.steps():
            yield from indices

    def __len__(self) -> int:
        n_r = self.samples_per_rank[self.rank]
        probed = range(self.start_step, min(self.steps_per_epoch, len(self.step_splits))) if self.epoch == 0 else ()
        return max(0, self.steps_per_epoch - self.start_step) * n_r + sum(self.step_splits[s][self.rank] - n_r
                                                                          for s in probed)


def split_micro_batches(indices: Sequence[int], micro_batch: int) -> Iterator[list[int]]:
    """Consecutive micro-batches of micro_batch indices (the last one shorter if
    len(indices) is not a multiple; the planner makes n_r = m_r * k_r exactly)."""
    if micro_batch < 1:
        raise ValueError("micro_batch must be >= 1")
    for first in range(0, len(indices), micro_batch):
        yield list(indices[first : first + micro_batch])


def split_accumulation(indices: Sequence[int], accumulation_steps: int) -> list[list[int]]:
    """`accumulation_steps` consecutive micro-batches of the indices, as even as they can be (the first ones
    one larger): for an engine that steps at each k-th micro-batch whatever their size (DeepSpeed counts
    its micro-steps), so a stair probe's count changes the micro-batches, never k."""
    if accumulation_steps < 1 or len(indices) < accumulation_steps:
        raise ValueError(f"{len(indices)} samples make no {accumulation_steps} micro-batches of at least one")
    size, larger = divmod(len(indices), accumulation_steps)
    bounds = [0]
    for number in range(accumulation_steps):
        bounds.append(bounds[-1] + size + (1 if number < larger else 0))
    return [list(indices[first:end]) for first, end in zip(bounds, bounds[1:], strict=False)]
