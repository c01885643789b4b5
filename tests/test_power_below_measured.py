"""The fit below a learned curve's lowest measured cap (issue 16, session 9): a card that still waits
there under a conservative bound gives those watts for free; the bound is never kinder than speed in
proportion to the watts above static draw."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumix.power.budget import STATIC_SHARE_PRIOR, GpuPower, fit_to_budget

# gen-23 of the oracle benchmark (seed 16, granularity 16), as the hub learned it from a default profile:
# the 4090 measured down to 270 W (60 % of its default), where it still computes in 0.113 s against the
# 3090s' 0.163 s at stock: it waits a third of the step.
RTX4090_POINTS = ((270.0, 0.1132), (315.0, 0.104), (360.0, 0.1002), (405.0, 0.0999))
RTX3090_POINTS = ((210.0, 0.2953), (245.0, 0.2494), (280.0, 0.1865), (315.0, 0.171))


def rtx4090(index: int = 0, compute_s: float = 0.0972) -> GpuPower:
    """Its points scaled to its compute at stock (0.0972 s as measured)."""
    points = tuple((cap_w, seconds * compute_s / 0.0972) for cap_w, seconds in RTX4090_POINTS)
    return GpuPower(index=index, uuid=f"GPU-{index}", tier="RTX 4090 24G", cap_w=450, default_w=450, min_w=150,
                    max_w=600, compute_s=compute_s, comm_s=0.01, power_points=points)


def rtx3090(index: int) -> GpuPower:
    return GpuPower(index=index, uuid=f"GPU-{index}", tier="RTX 3090 24G", cap_w=350, default_w=350, min_w=100,
                    max_w=350, compute_s=0.1633, comm_s=0.01, power_points=RTX3090_POINTS)


def caps_of(fit) -> dict[int, float]:
    return {p.index: p.new_w for p in fit.proposals}


def test_a_card_that_still_waits_below_its_measured_caps_gives_those_watts_before_pacing_cards_lose_any() -> None:
    # 250 W to shed from 1150 W. Before: the 4090 stopped at 270 W (its lowest measured cap) and the
    # pacing 3090s gave the last 70 W (slower job). Under the static-power bound the 4090 computes
    # 0.1132 x (270 - 36) / (cap - 36) s, still within the 3090s' 0.1633 s down to ~198 W.
    gpus = [rtx4090(0), rtx3090(1), rtx3090(2)]
    fit = fit_to_budget(gpus, 900)
    caps = caps_of(fit)
    assert sum(caps.values()) <= 900
    assert caps[1] == caps[2] == 350.0  # the pacing cards keep every watt
    assert 198.0 <= caps[0] <= 200.0  # not below where the bound makes it the slowest
    assert fit.throughput_kept == pytest.approx(1.0)


def test_the_bound_below_the_lowest_measured_cap_is_speed_in_proportion_to_watts_above_static_draw() -> None:
    # One card, a budget that takes it to its 150 W minimum: the predicted compute there is at least
    # 0.1132 x (270 - 36) / (150 - 36) = 0.232 s (the lowest segment's line said 0.138 s, the prior's
    # fourth root 0.131 s: a published 4090 sweep keeps ~45 % of its speed at 150 W, not ~75 %).
    gpu = rtx4090(0)
    fit = fit_to_budget([gpu], 150)
    assert caps_of(fit) == {0: 150.0}
    static_w = STATIC_SHARE_PRIOR * gpu.default_w
    bound_s = 0.1132 * (270 - static_w) / (150 - static_w)
    assert fit.step_after_s == pytest.approx(bound_s + gpu.comm_s, rel=1e-6)


def test_watts_that_cost_below_the_measured_caps_still_come_after_measured_ones() -> None:
    # A 4090 that paces (0.2 s at stock): any cut below 270 W costs, so the 3090s' measured watts go first
    # (they wait: 0.1633 s, and still within 0.2 s down to ~290 W).
    gpus = [rtx4090(0, compute_s=0.2), rtx3090(1), rtx3090(2)]
    fit = fit_to_budget(gpus, 1150 - 180 - 100)
    caps = caps_of(fit)
    assert caps[0] >= 270.0 and sum(caps.values()) <= 870


@settings(max_examples=30, deadline=None)
@given(budget_w=st.floats(min_value=400, max_value=1150), paced_s=st.floats(min_value=0.05, max_value=0.4),
       static_share=st.floats(min_value=0.0, max_value=0.5))
def test_learned_fits_stay_within_the_budget_and_the_ranges(budget_w: float, paced_s: float,
                                                            static_share: float) -> None:
    import gpumix.power.budget as budget

    old = budget.STATIC_SHARE_PRIOR
    budget.STATIC_SHARE_PRIOR = static_share  # a static draw up to the minimum cap and beyond: still finite
    try:
        gpus = [rtx4090(0, compute_s=paced_s), rtx3090(1), rtx3090(2)]
        fit = fit_to_budget(gpus, budget_w)
    finally:
        budget.STATIC_SHARE_PRIOR = old
    caps = caps_of(fit)
    assert sum(caps.values()) <= budget_w + 1e-9
    assert all(g.min_w <= caps[g.index] <= g.max_w for g in gpus)
    assert fit.step_after_s is not None and fit.step_after_s < float("inf")


def test_the_supplies_fit_predicts_with_the_same_bound() -> None:
    # A supply that leaves one 4090 150 W (headroom 0): the layout fit's predicted step is the bound's
    # 0.232 s, not the step model's kinder 0.138 s (the two fits must not disagree on the same cap).
    from gpumix.power.layout import parse_layout
    from gpumix.power.supplies import fit_to_layout

    layout = parse_layout({"headroom": 0.0, "slot_share": 0.0,
                           "supplies": [{"name": "a", "rating_w": 150, "board": True, "gpus": [0]}]}, 1)
    gpu = rtx4090(0)
    fit = fit_to_layout([gpu], layout)
    assert caps_of(fit) == {0: 150.0}
    static_w = STATIC_SHARE_PRIOR * gpu.default_w
    assert fit.step_after_s == pytest.approx(0.1132 * (270 - static_w) / (150 - static_w) + gpu.comm_s, rel=1e-6)


def test_the_bound_stays_finite_at_a_cap_at_or_under_the_static_draw() -> None:
    from gpumix.power.budget import _below_measured_bound

    for default_w, low_w, cap_w in ((0.0, 10.0, 0.0), (450.0, 270.0, 36.0), (450.0, 270.0, 0.0), (1e6, 2e5, 1.0)):
        ratio = _below_measured_bound(default_w, low_w, cap_w)
        assert 1.0 <= ratio < float("inf")
