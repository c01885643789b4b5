"""The step model's priors: what the planner and the power fit assume until the hub has measured.

Each is a published or measured rule of thumb (../docs/planner.md, ../docs/power.md), not the truth:
the planner replaces the link prior by measured communication, and compute by the job's own curve,
as soon as the ranks report them. The simulated world keeps its own physics (gpumix.sim.world),
so a demo can show where these priors are wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

# Host<->device copies reach about 80 % of a link's theoretical rate (24-27 of 31.5 GB/s measured on
# gen4 x16 RTX 4090s; design notes, section 6).
LINK_EFFICIENCY_PRIOR = 0.8

# What one more pass of forward and backward costs beyond its samples' tiles (kernel launches, the
# framework's per-call work), at most: measured on an H100 training ResNet-50 in eager PyTorch, 5.4 ms a
# pass in fp32 and 5.0 ms under bf16 autocast (benchmarks/pass_cost_probe.py and pass_cost_fit.py,
# docs/planner.md, session 14). memory.factorize and plan.stairs charge it for each pass, in samples of
# a rank's own compute (pass_cost_samples: a 3090 computing 400 samples/s, 2.2), at most a quarter of a
# measured pass (stairs.PASS_SHARE_MAX). Another network pays another: a BERT-base encoder on the same
# H100 6.6 ms (fp32) and 11.4 ms (bf16), session 15; what a prior off by 2x costs is in docs/planner.md.
PASS_COST_PRIOR_S = 0.0054


def pass_cost_samples(seconds_per_sample: float) -> float:
    """PASS_COST_PRIOR_S in samples of a rank computing one sample in `seconds_per_sample`."""
    if not seconds_per_sample > 0:
        return 0.0
    return PASS_COST_PRIOR_S / seconds_per_sample


def allreduce_seconds_prior(link_rates: Sequence[float], gradient_bytes: float) -> float:
    """A ring all-reduce staged through host memory: each GPU moves 2(n-1)/n x size over its own
    link, and the slowest link sets the pace."""
    ranks = len(link_rates)
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) / ranks * gradient_bytes / min(link_rates)


def power_factor_prior(cap_w: float, default_w: float) -> float:
    """Throughput kept under a power cap, assumed concave: (cap/default)^0.25, at most 1 (a 3090
    capped to 80 % keeps ~95 %). Published sweeps differ by card, precision and workload."""
    return min(1.0, (cap_w / default_w) ** 0.25)
