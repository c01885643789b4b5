"""Memory and micro-batches: the largest micro-batch that fits, and counts that split into
good micro-batches (n_r = m_r * k_r exactly, no tiny micro-batches)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpumix.plan.split_types import MAX_ACCUMULATION_STEPS, PlanRequest, RankMeasure


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
    With a tile (the granularity: a pass computes whole tiles), the fewest tiles over all passes,
    k * ceil(m / tile), among micro-batches of at least half the cap (good_count's range), then the
    smallest k: 240 samples under a cap of 133 in tiles of 16 are 3 x 80 (15 tiles), not 2 x 120
    (16); 208 stays 2 x 104 (14 tiles) rather than 13 passes of 16, a micro-batch far under the cap."""
    if cap is None or samples <= cap:
        return samples, 1
    low_k = math.ceil(samples / cap)
    high_k = min(max_k, samples)
    best: tuple[int, int] | None = None
    for k in range(low_k, high_k + 1):
        if samples % k:
            continue
        if tile <= 1 or best is not None and k > 2 * samples // cap:
            return best or (samples // k, k)
        if best is None or k * math.ceil(samples // k / tile) < best[1] * math.ceil(best[0] / tile):
            best = (samples // k, k)
    return best


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
