"""Stairs, learned from what a rank measured (issue 16).

A GPU computes a pass in whole tiles; the planner is told the granularity, not the tile. A step's
compute is a fixed cost plus work, so its time can grow at most as fast as its work: a point measured
slower than proportional to a smaller one (168 samples taking 2x the time of 96) says the work was
more than the samples, i.e. the passes were padded to wider tiles. learned_tile takes the narrowest
tile (2^j samples, at most MAX_ALIGNED_TILE) under which every pair of measured points grows no faster
than its work; the rank's curve then runs over whole-tile work (tiled_curve), so the search sees 168 as
3 x 64 rather than on the line between 96 and 176. Where the points say nothing (one point, or all on
the line) the curve pads nothing: the granularity says which counts and micro-batches to hand out, not
what a GPU pads a pass to (session 16: a 3090 told 16, whose waves are 8 wide, had its 176 as 2 x 88
priced as 2 x 96, and was given 192).
Where no tile fits them (noise past STAIR_TOLERANCE, or passes not modelled), their line sets no floor
below them: it is bounded by FIXED_SHARE_MAX (without_floor; compute_curve.NoFloorCurve says why).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from itertools import combinations

from gpumix.model.compute_curve import ComputeCurve, NoFloorCurve, TiledCurve
from gpumix.model.priors import pass_cost_samples
from gpumix.plan.memory import MAX_ALIGNED_TILE, effective_max_k, factorize, micro_batch_cap
from gpumix.plan.split_types import PlanRequest, RankMeasure

# How much faster than its work a point may seem to grow before it says "stair": the medians'
# noise (2 % per step in the simulated world, a median of 10 steps) with room to spare.
STAIR_TOLERANCE = 0.03


def _pass_samples(samples: int, micro_batch: int | None) -> int:
    """A full pass's samples: the micro-batch, or the whole count without one (or one larger)."""
    return micro_batch if micro_batch and 0 < micro_batch <= samples else samples


def passes(samples: int, micro_batch: int | None) -> int:
    """Passes of `samples` in micro-batches of `micro_batch` (and one for the rest); one without it."""
    return math.ceil(samples / _pass_samples(samples, micro_batch)) if samples > 0 else 0


def pass_work(samples: int, micro_batch: int | None, tile: int, pass_cost: float = 0.0) -> float:
    """Samples' worth of compute of `samples` run in passes of `micro_batch` (and one for the rest),
    each padded to whole tiles and costing `pass_cost` samples more (points_pass_cost)."""
    micro = _pass_samples(samples, micro_batch)
    full, rest = divmod(samples, micro)
    padded = full * math.ceil(micro / tile) * tile + (math.ceil(rest / tile) * tile if rest else 0)
    return padded + (full + (1 if rest else 0)) * pass_cost


# A pass's cost is at most this share of a measured pass: in the H100's ResNet-50 (pass_cost_probe.py)
# the 5.4 ms were 18-23 % of a pass of 36-48 samples; a model whose whole pass is shorter pays less.
PASS_SHARE_MAX = 0.25


def points_pass_cost(points: Sequence[tuple[int, int | None, float]]) -> float:
    """The prior's pass cost (priors.PASS_COST_PRIOR_S) in samples of this rank's compute, at its last
    point's seconds a sample, at most PASS_SHARE_MAX of that point's pass: ~5 ms of launches, 3.4 samples
    of a 4090 and 2.2 of a 3090. Without it two points in 1 and 3 passes read as a stair that is not
    there, or hide one that is (seed 71 gen-05: a 4090's 168 as 3 x 56 took 1.55x its 128 in one pass,
    past the 3 % over 16-wide tiles' 1.5x, so no tile was learned and the re-plan put 168 on the tier
    again)."""
    samples, micro, seconds = points[-1] if points else (0, None, 0.0)
    if samples <= 0 or seconds <= 0:
        return 0.0
    return min(pass_cost_samples(seconds / samples), PASS_SHARE_MAX * samples / passes(samples, micro))


# A step's fixed cost is at most this share of it, so more work takes at least this share of its growth
# in time: on an H200 time-sliced with a competing process, 256 samples took 22.1 ms and 512 took 35.3
# (a fixed ~8.9 ms, 40 % of the smaller step: 60 % of the work's growth). A pair that grows less was
# padded to the same whole tiles (88 as 2 x 44 taking what 96 as 2 x 48 takes: 48 in tiles of 8).
FIXED_SHARE_MAX = 0.5


# The mean range of n equally noisy values, in their standard deviation (d2 of quality control's range
# charts): a work measured at more counts spreads wider by chance alone, so its points may spread as
# much more than a pair's before they say the work is not one.
_RANGE_D2 = (0.0, 0.0, 1.128, 1.693, 2.059, 2.326, 2.534, 2.704, 2.847)


def _range_growth(points: int) -> float:
    return _RANGE_D2[min(points, len(_RANGE_D2) - 1)] / _RANGE_D2[2] if points > 2 else 1.0


def consistent(points: Sequence[tuple[int, int | None, float]], tile: int) -> bool:
    """Points of one whole-tile work take the same time (within the tolerance, wider for more of them),
    and no work takes more time, relative to another, than it is more work, nor less than its growth
    less the most a fixed cost can hide. A work's time is the median of its points': a stair probe's
    counts share works (56, 60 and 64 are 64 in tiles of 16), and checking each pair of them apart let
    one pair's noise rule the true tile out (g4 seed 29 gen-02: a 4090's 60 at -2.4 % and 72 at +2.1 %,
    so no tile fit it)."""
    pass_cost = points_pass_cost(points)
    by_work: dict[float, list[float]] = {}
    for n, m, t in points:
        by_work.setdefault(pass_work(n, m, tile, pass_cost), []).append(t)
    if any(max(times) > min(times) * (1 + STAIR_TOLERANCE * _range_growth(len(times))) for times in by_work.values()):
        return False
    works = sorted((w, statistics.median(times)) for w, times in by_work.items())
    for (w_a, t_a), (w_b, t_b) in combinations(works, 2):
        if t_b > t_a * (w_b / w_a) * (1 + STAIR_TOLERANCE):
            return False
        if t_b < t_a * (1 + (1 - FIXED_SHARE_MAX) * (w_b / w_a - 1)) * (1 - STAIR_TOLERANCE):
            return False
    return True


# How much more of a step the fixed cost a narrower tile implies may be than the least any fitting tile
# implies, before a wider one is taken: two medians 2 % off each, 20 % apart in work, move the line's
# intercept by about 10-15 % of a step.
FIXED_SHARE_SLACK = 0.15


def fixed_share(points: Sequence[tuple[int, int | None, float]], tile: int) -> float | None:
    """The fixed cost the points imply under this tile, as a share of the shortest step: the intercept of
    the least-squares line of time over whole-tile work (its size, either sign). None: one work only."""
    pass_cost = points_pass_cost(points)
    works = [pass_work(n, m, tile, pass_cost) for n, m, _ in points]
    if len(set(works)) < 2:
        return None
    times = [t for _, _, t in points]
    mean_w, mean_t = sum(works) / len(works), sum(times) / len(times)
    slope = sum((w - mean_w) * (t - mean_t) for w, t in zip(works, times, strict=True)) \
        / sum((w - mean_w) ** 2 for w in works)
    return abs(mean_t - slope * mean_w) / min(times)


def fitting_tiles(points: Sequence[tuple[int, int | None, float]], narrowest: int) -> list[int]:
    """The tiles from `narrowest` up (x 2^j, at most MAX_ALIGNED_TILE) the points are consistent with,
    narrowest first."""
    found = [p for p in points if p[0] > 0 and p[2] > 0]
    tiles, tile = [], max(1, narrowest)
    while tile <= MAX_ALIGNED_TILE:
        if consistent(found, tile):
            tiles.append(tile)
        tile *= 2
    return tiles


def learned_tile(points: Sequence[tuple[int, int | None, float]], granularity: int) -> int:
    """The narrowest tile (granularity x 2^j <= MAX_ALIGNED_TILE) the points (samples, micro-batch,
    compute s) are consistent with, unless a wider consistent one explains them with a fixed cost smaller
    by more than FIXED_SHARE_SLACK of a step; the granularity where they fit none. Consistency alone lets
    a fixed cost hide a stair (g4 seed 97 gen-16: a 5070 Ti's 52 and 64, which run as 7 and 8 waves of 8,
    fit no tile with a fixed cost of 38 % of a step and tiles of 8 with none; the narrowest priced 56
    above 52, and the plan left the 4090s on their stair)."""
    found = [p for p in points if p[0] > 0 and p[2] > 0]
    fitting = fitting_tiles(found, granularity)
    if not fitting:
        return max(1, granularity)
    shares = {tile: fixed_share(found, tile) for tile in fitting}
    if shares[fitting[0]] is None:  # one work under the narrowest: under every wider one too
        return fitting[0]
    least = min(share for share in shares.values() if share is not None)
    return next(t for t in fitting if (share := shares[t]) is not None and share <= least + FIXED_SHARE_SLACK)


def widest_tile(points: Sequence[tuple[int, int | None, float]], tile: int) -> int:
    """The widest tile (tile x 2^j <= MAX_ALIGNED_TILE) the points are consistent with at every width from
    `tile` (the one learned from them) up to it: how wide a pass may be padded, as far as they say.
    MAX_ALIGNED_TILE where they rule nothing out: one work, or no fit even at `tile` (noise)."""
    found = [p for p in points if p[0] > 0 and p[2] > 0]
    tile = max(1, tile)
    if not consistent(found, tile):
        return MAX_ALIGNED_TILE
    while tile * 2 <= MAX_ALIGNED_TILE and consistent(found, tile * 2):
        tile *= 2
    return tile


def with_stairs(measures: Sequence[RankMeasure], request: PlanRequest) -> list[RankMeasure]:
    """The measures, each rank with its curve over whole-tile work and its passes' cost: its tile where
    its points show stairs (learned_tile), or another rank's of its tier (the same GPU model runs the same
    kernels), else none. Micro-batches are priced as they will be handed out: whole multiples of the
    granularity (or of the tile, where wider) where factorize finds them."""
    granularity = max(1, request.granularity)
    tiles = {m.rank: learned_tile(m.measured_points(), 1) for m in measures}
    # The tier's tile: the narrowest any of its ranks showed (a rank whose points say nothing shows no
    # tile and has no say). A tile too wide is what noise shows (two medians a hair past the
    # tolerance at the true tile: seed 17 gen-03, a 3090 at 64 and 68 read as 16 wide where the others
    # read 8, and 80 samples then cost the tier no more than 68); a stair narrower than the true one
    # cannot show (the true tile's padding is in the pair's times).
    by_tier = _narrowest_by_tier(measures, {rank: tile for rank, tile in tiles.items() if tile > 1})
    # The widest tile a pass may be padded to: the narrowest any rank of the tier leaves open (one card
    # model pads alike), so a count's alignment past it is no guess (memory.factorize).
    widest = {m.rank: widest_tile(m.measured_points(), tiles[m.rank]) for m in measures}
    widest_by_tier = _narrowest_by_tier(measures, widest)
    found = []
    for m in measures:
        points = [p for p in m.measured_points() if p[0] > 0 and p[2] > 0]
        if points:  # no point (no split yet): its estimate stays
            tile = by_tier.get(m.tier, 1) if m.tier is not None else tiles[m.rank]
            open_tile = max(tile, widest_by_tier[m.tier] if m.tier is not None else widest[m.rank])
            # A count in more passes than its points pays their cost (priors.PASS_COST_PRIOR_S): the
            # plain curve did not see it (seed 73 gen-08: 80 as 5 x 16 on a 5070 Ti measured at 96 as 2 x 48
            # was predicted 0.204 s, proportional, and took 0.217 s)
            curve = tiled_curve(points, tile, micro_batch_cap(m, request), effective_max_k(request),
                                (m.current_samples, m.micro_batch), max(tile, granularity), open_tile)
            m = replace(m, tiled_curve=curve, tile_samples=tile if tile > granularity else None,
                        learned_tile_samples=tile, widest_tile_samples=open_tile)
        found.append(m)
    return found


def _narrowest_by_tier(measures: Sequence[RankMeasure], tiles: dict[int, int]) -> dict[str, int]:
    """Each tier's narrowest tile among its ranks' in `tiles` (a rank not in it has no say)."""
    by_tier: dict[str, int] = {}
    for m in measures:
        if m.tier is not None and m.rank in tiles:
            by_tier[m.tier] = min(by_tier.get(m.tier, tiles[m.rank]), tiles[m.rank])
    return by_tier


def without_floor(curve: ComputeCurve) -> ComputeCurve:
    """The curve through points no tile fits, its line below them bounded by FIXED_SHARE_MAX
    (compute_curve.NoFloorCurve says why)."""
    return NoFloorCurve(curve.points, FIXED_SHARE_MAX) if len(curve.points) > 1 else curve


def tiled_curve(points: Sequence[tuple[int, int | None, float]], tile: int, cap: int | None,
                max_k: int, running: tuple[int, int | None] = (0, None), micro_tile: int = 0,
                widest: int = MAX_ALIGNED_TILE) -> TiledCurve:
    """The rank's curve over whole-tile work: measured points at their padded work; a count costs
    the work of its micro-batches as factorize would choose them with `micro_tile` (the planner's:
    the granularity or the tile, the wider; this tile without it) and `widest` (widest_tile), or the
    micro-batch the count `running` has now."""
    pass_cost = points_pass_cost(points)
    base = ComputeCurve.from_points((pass_work(n, m, tile, pass_cost), t) for n, m, t in points)
    if len({pass_work(n, m, tile, pass_cost) for n, m, _ in points}) < 2:
        # one point: proportional over its work, its passes' cost in it, so that cost is a fixed part:
        # 128 in one pass on a 4090 (3.4 samples a pass) puts 168 in one at 171.4 / 131.4 of its time
        n, m, t = points[-1]
        base = ComputeCurve.proportional(pass_work(n, m, tile, pass_cost) / t)
    elif not consistent(points, tile):  # a tier's tile its own points do not fit
        base = without_floor(base)

    known: dict[int, float] = {}  # the search asks the same counts many times; factorize scans k

    def work(samples: int) -> float:
        if samples not in known:
            micro = running[1] if samples == running[0] and running[1] else \
                (factorize(samples, cap, max_k, micro_tile or tile, pass_cost, widest, tile) or (samples, 1))[0]
            known[samples] = pass_work(samples, micro, tile, pass_cost)
        return known[samples]

    return TiledCurve.over(base, work, pass_cost)  # the least work a count can be: n in one pass
