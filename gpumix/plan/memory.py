"""Memory and micro-batches: the largest micro-batch that fits, and counts that split into
good micro-batches (n_r = m_r * k_r exactly, no tiny micro-batches)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpumix.model.priors import PASS_COST_PRIOR_SAMPLES
from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS, PlanRequest, RankMeasure

# The widest tile a count's own alignment may stand for, in samples: a wider one trades passes for
# tiles that may not exist (160 as 5 x 32 rather than 2 x 80). 16 is the widest wave of the simulated
# cards (waves of 4-16 samples): chosen in that world, not measured on real GPUs.
MAX_ALIGNED_TILE = 16


def estimate_mem_per_sample(points: Sequence[tuple[int, float]]) -> float | None:
    """Bytes per sample of a micro-batch: least-squares slope of peak memory over
    micro-batch size. None with fewer than two distinct sizes or a slope <= 0."""
    if len({m for m, _ in points}) < 2:
        return None
    mean_m = sum(m for m, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    spread = sum((m - mean_m) ** 2 for m, _ in points)
    slope = sum((m - mean_m) * (b - mean_b) for m, b in points) / spread
    return slope if slope > 0 else None


def micro_batch_cap(measure: RankMeasure, request: PlanRequest) -> int | None:
    """The largest micro-batch that fits, or None when nothing limits it.

    The margin applies in both cases: torch's peak misses the CUDA context and
    fragmentation. Without a per-sample figure the whole peak is taken to grow
    with the micro-batch, which overestimates the cost of a sample: safe.
    The current micro-batch runs already, so the cap is never below it.
    """
    cap: int | None = None
    if measure.mem_total_bytes and measure.mem_peak_bytes and measure.micro_batch:
        usable = measure.mem_total_bytes * (1.0 - request.memory_safety_margin)
        per_sample = measure.mem_per_sample_bytes
        if per_sample:
            fixed = measure.mem_peak_bytes - per_sample * measure.micro_batch
            cap = math.floor((usable - fixed) / per_sample)
        else:
            cap = math.floor(usable * measure.micro_batch / measure.mem_peak_bytes)
        cap = max(cap, measure.micro_batch)
    if request.max_micro_batch is not None:
        cap = request.max_micro_batch if cap is None else min(cap, request.max_micro_batch)
    return None if cap is None else max(1, cap)


def effective_max_k(request: PlanRequest) -> int:
    """The accumulation steps a rank may take: as requested, else MAX_ACCUMULATION_STEPS."""
    return request.max_accumulation_steps or MAX_ACCUMULATION_STEPS


def factorize(samples: int, cap: int | None, max_k: int, tile: int = 1) -> tuple[int, int] | None:
    """(m, k) with m * k == samples, m <= cap, k <= max_k and k as small as possible; None if none.
    With a tile (the granularity: a pass computes whole tiles), the work over the passes is
    k * (ceil(m / T) * T + p) for a pass cost p no one measured (from 0 to PASS_COST_PRIOR_SAMPLES):
    the split whose work is least above the best at either end (the least regret; then the least work
    at the prior, then the smallest k): 88 under a cap of 84 in tiles of 8 (told or learned) is 11 x 8
    (88 samples of work at p = 0, 1.0 % above 2 x 44's 98 at p = 1), not 2 x 44 (96: 9.1 % above 11 x
    8's 88 at p = 0); in tiles of 4 (88 aligned to 8 by assumption) the prior's least work, 2 x 44. T is the count's own
    alignment (aligned_tile: GPUs tile in powers of two, wider than the granularity may say), over
    micro-batches of at least half the cap (good_count's range) and micro-batches of whole T. Under a
    cap of 133: 240 in tiles of 16 are 3 x 80 (15 tiles), not 2 x 120 (16); 208 are 13 x 16
    (13 tiles), not 2 x 104 (14: a wasted tile outweighs 11 more passes); 168 at granularity 4
    (aligned to 8) are 3 x 56 (21 tiles of 8), not 2 x 84 (22)."""
    if cap is None or samples <= cap:
        return samples, 1
    low_k = math.ceil(samples / cap)
    high_k = min(max_k, samples)
    if tile <= 1:
        return next(((samples // k, k) for k in range(low_k, high_k + 1) if samples % k == 0), None)
    aligned = aligned_tile(samples, tile)
    splits = []  # (k, m, padded work in samples)
    for k in range(low_k, high_k + 1):
        micro = samples // k
        if samples % k or (k > 2 * samples // cap and micro % aligned):
            continue  # past good_count's range only whole tiles: no pass of a partial tile
        splits.append((k, micro, k * math.ceil(micro / aligned) * aligned))
    if not splits:  # no whole-tile split either: the smallest k that divides, as without a tile
        return factorize(samples, cap, max_k)
    # Work is linear in p, so a split's worst ratio to the best over the range is at one end. Where T is
    # only the count's alignment (wider than the tile given), many narrow passes bet on it: weighed from
    # p = 0 there too, a 4090 (waves of 16 in the simulated world) ran 136 as 17 x 8, 272 samples of work
    # where 2 x 68 is 160 (seed 29 gen-16: 0.428 s a step, 0.232 s predicted). There the prior decides.
    ends = (0.0 if aligned <= max(1, tile) else PASS_COST_PRIOR_SAMPLES, PASS_COST_PRIOR_SAMPLES)
    least = [min(w + k * p for k, _, w in splits) for p in ends]
    k, micro, _ = min(splits, key=lambda s: (
        max((s[2] + s[0] * p) / low for p, low in zip(ends, least, strict=True)),
        s[2] + s[0] * PASS_COST_PRIOR_SAMPLES, s[0]))
    return micro, k


def aligned_tile(samples: int, granularity: int) -> int:
    """The tile a pass of this count is taken to compute in: granularity x 2^j, the largest dividing
    the count, at most MAX_ALIGNED_TILE (the granularity itself for a count off its multiples)."""
    tile = max(1, granularity)
    while tile * 2 <= MAX_ALIGNED_TILE and samples % (tile * 2) == 0:
        tile *= 2
    return tile


def good_count(samples: int, cap: int | None, max_k: int) -> bool:
    """Splits into equal micro-batches at least half the cap: accumulation, but no tiny
    micro-batches (a prime n_r above the cap would need micro-batches of one). The smallest
    k that divides gives the largest micro-batch, so only k up to 2n/cap can do."""
    if cap is None or samples <= cap:
        return True
    high_k = min(max_k, 2 * samples // cap)
    return any(samples % k == 0 for k in range(math.ceil(samples / cap), high_k + 1))


def good_count_at_most(samples: int, cap: int | None, max_k: int) -> int:
    """The largest count <= samples that is good_count: some m * k with cap/2 <= m <= cap, k <= max_k
    (one pass over k, not a walk down the counts)."""
    if cap is None or samples <= cap:
        return samples
    half = math.ceil(cap / 2)
    best = cap
    for k in range(2, min(max_k, samples // half) + 1):
        micro = min(cap, samples // k)
        if micro >= half:
            best = max(best, micro * k)
    return best
