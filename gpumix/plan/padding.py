"""Stairs one measured count cannot show: what another count may pay, in expectation.

A GPU computes a pass in whole tiles (plan.stairs), and a rank measured at one count cannot show how
wide they are: from 64 samples on every rank, 88 costs 88 in tiles of 4 or 8 and 96 in tiles of 16.
The search keeps choosing by the plain curve (a prior on the tile chose worse splits: docs/planner.md,
session 7); the prediction (the step time shown, and the gain a restart is decided by) takes, for such
a rank, the mean over the plain curve and the tiles its tier has not ruled out (granularity x 2^j up to
MAX_ALIGNED_TILE, consistent with every point of every rank of the tier: the same GPU model runs the
same kernels), so a count that may land on a stair is predicted as it lands on average. The split
running now is predicted as measured (its count is a point of every tile's curve). Without a
granularity (1) nothing changes: the user has said nothing of tiles, and counts are predicted plainly.

Only ranks measured at one count: once a rank has run a second, its points had their chance to show a
stair (plan.stairs learns it), and the re-plan's small moves from there are predicted by the curve
through them; the mean there too cost second restarts the world pays for (docs/planner.md, session 10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpumix.model.compute_curve import ComputeCurve
from gpumix.model.step_model import Basis
from gpumix.plan.memory import MAX_ALIGNED_TILE, effective_max_k, micro_batch_cap
from gpumix.plan.split_types import PlanRequest, RankMeasure
from gpumix.plan.stairs import fitting_tiles, tiled_curve


def open_tiles(points: Sequence[tuple[int, int | None, float]], granularity: int) -> set[int]:
    """The tiles wider than the granularity (x 2^j, at most MAX_ALIGNED_TILE) these points do not rule out."""
    return set(fitting_tiles(points, max(1, granularity) * 2))


PADDING_BASIS = "another count: the mean of the plain curve and of whole tiles of {tiles} samples (not yet ruled out)"


def with_possible_stairs(measures: Sequence[RankMeasure], request: PlanRequest) -> list[RankMeasure]:
    """The measures, each rank measured at one count and without a learned tile with its curve under
    every tile its tier leaves open (a tile one rank's points rule out is out for the tier)."""
    if not 1 < request.granularity < MAX_ALIGNED_TILE:  # granularity 1: no tile said, counts predicted plainly
        return list(measures)
    open_by_rank = {m.rank: open_tiles(m.measured_points(), request.granularity) for m in measures}
    by_tier: dict[str, set[int]] = {}
    for m in measures:
        if m.tier is not None:
            by_tier[m.tier] = by_tier.get(m.tier, open_by_rank[m.rank]) & open_by_rank[m.rank]
    found = []
    for m in measures:
        tiles = by_tier[m.tier] if m.tier is not None else open_by_rank[m.rank]
        if m.tile_samples is None and tiles and len({n for n, _, t in m.measured_points() if n > 0 and t > 0}) == 1:
            curves = tuple(tiled_curve(m.measured_points(), tile, micro_batch_cap(m, request),
                                       effective_max_k(request), (m.current_samples, m.micro_batch))
                           for tile in sorted(tiles))
            m = replace(m, possible_curves=curves, possible_tiles=tuple(sorted(tiles)))
        found.append(m)
    return found


def padding_basis(m: RankMeasure, basis: Basis) -> Basis:
    """The rank's compute basis, saying where its prediction takes the mean over open tiles."""
    if not m.possible_tiles:
        return basis
    note = PADDING_BASIS.format(tiles=", ".join(str(t) for t in m.possible_tiles))
    return replace(basis, prior=f"{basis.prior}; {note}" if basis.prior else note)


@dataclass(frozen=True)
class ExpectedCurve(ComputeCurve):
    """A rank's compute curve as its step is predicted (RankMeasure.expected_time_s): the mean over the
    tiles left open where it has them, its own curve elsewhere. For a caller that takes a curve and
    compares splits (the joint offer, gpumix/cli/plan_joint.py) on the planner's prediction."""

    measure: RankMeasure | None = None
    # a whole count's prediction, once: the joint search's bisections price the same count thousands of
    # times, and each prediction builds the plain curve and one tiled curve per open tile
    known_s: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, m: RankMeasure) -> ExpectedCurve:
        return cls(m.compute_curve().points, m)

    def time_s(self, samples: float) -> float:
        assert self.measure is not None
        if samples <= 0 or samples != int(samples):
            return self.measure.compute_curve().time_s(samples)
        count = int(samples)
        known = self.known_s.get(count)
        if known is None:
            known = self.known_s[count] = self.measure.expected_time_s(count)
        return known
