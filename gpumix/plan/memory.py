"""Memory and micro-batches: the largest micro-batch that fits, and counts that split into
good micro-batches (n_r = m_r * k_r exactly, no tiny micro-batches)."""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def factorize(samples: int, cap: int | None, max_k: int, tile: int = 1,
              pass_cost: float = 0.0, widest: int = MAX_ALIGNED_TILE,
              least_tile: int | None = None) -> tuple[int, int] | None:
    """(m, k) with m * k == samples, m <= cap, k <= max_k and k as small as possible; None if none.
    With a tile (the granularity, or one learned: a pass computes whole tiles), the split of least work
    k * (padded m + p): each pass's samples padded to whole tiles, plus `pass_cost` samples a pass (the
    measured priors.PASS_COST_PRIOR_S in the rank's own samples); then the smallest k. Where the count's
    alignment T (aligned_tile: GPUs tile in powers of two) is wider than the tile, it is only a guess,
    and a pass is padded on average over the tiles from the tile to T. Over micro-batches of at least
    half the cap (good_count's range) and micro-batches of whole T. Under a cap of 133 at 3.4 samples
    a pass (a 4090): 176 in tiles of 16 is 2 x 88 (192 + 6.8), not 11 x 16 (176 + 37.4); at 1 sample a
    pass 11 x 16 (187 against 194). At granularity 4, 168 (aligned to 8) is 3 x 56 (168 + 10.2) against
    2 x 84 (84 or 88: 172 + 6.8). `widest`: the widest tile the rank's points leave open (stairs.widest_tile),
    past which the alignment is no guess: a 3060 measured at 96 and 76 as 2 x 48 and 2 x 38 is no 16-wide
    tile (76 would cost 96's time), so 80 is 2 x 40 there, not 5 x 16 for a tile of 16 its points rule out.
    `least_tile`: the narrowest tile the card may compute in, where `tile` is only the granularity asked
    (the tile its points showed, 1 for none; None: `tile` is the card's own). Where the best whole-tile
    split takes at least two passes more than the fewest, the fewest-pass split is priced padded on
    average from that tile up, and taken if cheaper: 112 under a cap of 84 at granularity 16, no tile
    learned, runs as 2 x 56, not 7 x 16 (docs/planner.md, "Session 20")."""
    if cap is None or samples <= cap:
        return samples, 1
    low_k = least_passes(samples, cap)
    high_k = min(max_k, samples)
    if tile <= 1:
        return next(((samples // k, k) for k in range(low_k, high_k + 1) if samples % k == 0), None)
    aligned = min(aligned_tile(samples, tile), max(tile, widest))
    splits = []  # (k, m, padded work in samples)
    for k in range(low_k, high_k + 1):
        micro = samples // k
        if samples % k or (k > 2 * samples // cap and micro % aligned):
            continue  # past good_count's range only whole tiles: no pass of a partial tile
        splits.append((k, micro, k * _mean_padded(micro, tile, aligned)))
    if not splits:  # no whole-tile split either: the smallest k that divides, as without a tile
        return factorize(samples, cap, max_k)
    # Each pass costs its tiles and the pass cost: measured at 5.0-5.4 ms on an H100 (priors.PASS_COST_PRIOR_S),
    # 3.4 samples of a 4090 computing 0.2 s for 128, so 176 as 2 x 88 (2 x 6 waves of 16) beats 11 x 16.
    k, micro, work = min(splits, key=lambda s: (s[2] + s[0] * pass_cost, s[0]))
    if least_tile is not None and least_tile < tile and k >= low_k + 2:
        fewest_k = next((j for j in range(low_k, k) if samples % j == 0), None)
        if fewest_k is not None:
            fewest_work = fewest_k * (_mean_padded(samples // fewest_k, least_tile, aligned) + pass_cost)
            if fewest_work < work + k * pass_cost:
                return samples // fewest_k, fewest_k
    return micro, k


def _mean_padded(micro: int, tile: int, aligned: int) -> float:
    """A pass of `micro` samples padded to whole tiles, on average over the tiles from `tile` to `aligned`
    (x 2 each): wider than the tile told or learned, the count's alignment is only a guess."""
    tiles = [tile * 2**j for j in range(max(0, (aligned // max(1, tile)).bit_length() - 1) + 1)]
    return sum(math.ceil(micro / t) * t for t in tiles) / len(tiles)


def aligned_tile(samples: int, granularity: int) -> int:
    """The tile a pass of this count is taken to compute in: granularity x 2^j, the largest dividing
    the count, at most MAX_ALIGNED_TILE (the granularity itself for a count off its multiples)."""
    tile = max(1, granularity)
    while tile * 2 <= MAX_ALIGNED_TILE and samples % (tile * 2) == 0:
        tile *= 2
    return tile


def least_passes(samples: int, cap: int | None) -> int:
    """The fewest passes `samples` can run in under the micro-batch cap (one without a cap)."""
    return 1 if cap is None else max(1, math.ceil(samples / cap))


def good_count(samples: int, cap: int | None, max_k: int) -> bool:
    """Splits into equal micro-batches at least half the cap: accumulation, but no tiny
    micro-batches (a prime n_r above the cap would need micro-batches of one). The smallest
    k that divides gives the largest micro-batch, so only k up to 2n/cap can do."""
    if cap is None or samples <= cap:
        return True
    high_k = min(max_k, 2 * samples // cap)
    return any(samples % k == 0 for k in range(least_passes(samples, cap), high_k + 1))


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
