"""A stair probe: a few steps at counts near each rank's split, so the first plan sees its stairs.

A GPU computes in waves of tiles, so a step's time rises in stairs, and one measured count cannot show
where they are: first plans put fast cards one sample past a stair (docs/planner.md). The probe runs
each rank at its count +-1 and +-2 granules for STEPS_PER_SPLIT steps each (the hub turns each run into
a point: gpumix/hub/count_runs.py). Ranks pair up and trade samples, one taking what its partner gives,
so every step still trains the whole global batch: the sampler cuts the same global batches, only
at other places between the ranks, and a step's loss weights follow its own counts (n_r x R / B).

`gpumix run --stair-probe` asks for one through the first launch's environment (requested_probe_steps);
a script may also run one of its own accord. Standard library only; nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from gpumix.agent.launcher_env import ascii_count
from gpumix.wire.plan_file import STAIR_PROBE_ENV

OFFSETS = (1, 2)  # granules each way: the oracle's sets gained most from +-1 and +-2 (docs/planner.md, session 23)
# The hub leaves a run's first step out (count_runs); the 10 after it make a point as noisy as a split's
# (the median of MEDIAN_WINDOW steps). With 5, the oracle's world read probed stairs as noise: 16 rigs
# under 85 % of the oracle's gain, against 5 with 10 (docs/planner.md, session 24).
STEPS_PER_SPLIT = 11


def probe_splits(samples_per_rank: Sequence[int], granularity: int,
                 offsets: Sequence[int] = OFFSETS) -> list[list[int]]:
    """The splits a probe runs, in order, each with the same total as `samples_per_rank`: ranks in
    pairs (0, 1), (2, 3), ..., the first taking j granules from the second, then giving them; an odd
    last rank pairs with rank 0 in splits of their own. A trade that would leave a rank under one
    granule is left out. Empty for one rank."""
    counts = list(samples_per_rank)
    unit = max(1, granularity)
    pairs = [(a, a + 1) for a in range(0, len(counts) - 1, 2)]
    extra = [(len(counts) - 1, 0)] if len(counts) % 2 and len(counts) > 1 else []
    splits = []
    for group in ([pairs] if pairs else []) + ([extra] if extra else []):
        for j in offsets:
            for sign in (1, -1):
                split = list(counts)
                for a, b in group:
                    move = sign * j * unit
                    if split[a] + move >= unit and split[b] - move >= unit:
                        split[a] += move
                        split[b] -= move
                if split != counts:
                    splits.append(split)
    return splits


def probe_steps(samples_per_rank: Sequence[int], granularity: int, steps_per_split: int = STEPS_PER_SPLIT,
                offsets: Sequence[int] = OFFSETS) -> list[list[int]]:
    """The probe step by step: each of probe_splits' splits steps_per_split times."""
    return [split for split in probe_splits(samples_per_rank, granularity, offsets) for _ in range(steps_per_split)]


MAX_GRANULE = 65_536  # samples: what `gpumix run --granularity` takes at most


def requested_probe_steps(samples_per_rank: Sequence[int], env: Mapping[str, str] = os.environ,
                          multiple_of: int = 1) -> list[list[int]]:
    """probe_steps' splits where `gpumix run --stair-probe` asked this launch for a probe (STAIR_PROBE_ENV:
    its granule; set on the first launch only, so a resumed run never probes again), else none. A value
    that is not a granule gets one line on stderr and no probe: training goes on as it would without.
    `multiple_of`: the granule rounded up to a multiple of it (probe_granule)."""
    value = env.get(STAIR_PROBE_ENV)
    if value is None:
        return []
    granule = ascii_count(value, max_digits=6) or 0
    if not 1 <= granule <= MAX_GRANULE:
        print(f"gpumix: {STAIR_PROBE_ENV}={value[:40]!r} is not a granule of 1-{MAX_GRANULE} samples: no stair probe",
              file=sys.stderr)
        return []
    return probe_steps(samples_per_rank, probe_granule(granule, multiple_of))


def probe_granule(granule: int, multiple_of: int = 1) -> int:
    """The granule a probe trades, rounded up to a multiple of `multiple_of`: DeepSpeed's accumulation
    steps k, common to all ranks, so each probe count stays m x k, k micro-batches of one size
    (batch_split.split_accumulation), as the DeepSpeed split's counts are."""
    unit = max(1, multiple_of)
    return -(-max(1, granule) // unit) * unit


MEMORY_MARGIN = 0.10  # of the GPU's memory left free, as the planner's micro-batch cap leaves it


def probe_micro_batch(samples: int, micro_batch: int, peak_bytes: float | None = None,
                      total_bytes: float | None = None) -> int:
    """The micro-batch a rank runs a probe's count of `samples` in, decided by the rank alone (a step's
    passes are its own business; its all-reduce is one whatever they are): the whole count in one pass
    where it fits, the memory the split's micro-batch peaked at scaled by samples (an overestimate:
    the model's own state does not grow) under 1 - MEMORY_MARGIN of the GPU's; else even passes, the
    largest divisor of the count within the split's micro-batch. A short last pass would cost a whole
    pass for a few samples: the oracle's world read such points as stairs (docs/planner.md, session 23).
    Where even passes would take over twice the passes the split's micro-batch needs (a prime count),
    passes of the split's micro-batch, the last shorter."""
    if samples <= micro_batch:
        return samples
    if peak_bytes and total_bytes and peak_bytes * samples / micro_batch <= (1 - MEMORY_MARGIN) * total_bytes:
        return samples
    even = max(d for d in range(1, micro_batch + 1) if samples % d == 0)
    return even if samples // even <= 2 * -(-samples // micro_batch) else micro_batch
