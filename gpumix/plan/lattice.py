"""The measured lattice: what the split search assumes between measured splits.

Between measured splits the compute curve is a straight line, but real GPUs compute in stairs of
a width nobody told the planner (docs/planner.md: 13.8 ms for 512 samples on an H200, 17.4 ms for
563). A count on the lattice the rank was measured on (every measured count a multiple of it) sits
where the measurements sit, at a stair's edge if they did; a count off it may pay a whole stair more
than the line says. measured_lattice finds that lattice per rank; the search takes a split on it
when the line predicts it within LATTICE_TOLERANCE of the best split off it.
"""

from __future__ import annotations

from collections.abc import Sequence

# The predicted compute a split on the measured lattice may give up against one off it: a stair
# the line does not see costs more (a count 3 % past a stair's edge on a 4090 paid 12 % in the world).
LATTICE_TOLERANCE = 0.03
MAX_LATTICE = 1024  # samples: a coarser lattice is no finer guide than this one


def measured_lattice(measured_counts: Sequence[int], granularity: int) -> int:
    """The coarsest granularity x 2^j (at most MAX_LATTICE) dividing every count this rank was
    measured at; the granularity itself when none is coarser."""
    counts = [n for n in measured_counts if n > 0]
    lattice = max(1, granularity)
    while counts and lattice * 2 <= min(MAX_LATTICE, max(counts)) and all(n % (lattice * 2) == 0 for n in counts):
        lattice *= 2
    return lattice
