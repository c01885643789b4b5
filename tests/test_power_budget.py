"""Fitting power caps under a machine budget: ranges kept, the budget met, waiting cards cut first."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.model.priors import power_factor_prior as power_factor
from gpumix.power.budget import BudgetError, GpuPower, fit_to_budget
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot

# mixed-10: (tier, default W, min W, max W, compute s per step at the default cap: slow 3060s, fast 4090s)
DEMO = ([("RTX 3060 12G", 170, 100, 200, 0.40)] * 3 + [("RTX 3090 24G", 350, 100, 400, 0.18)] * 3
        + [("RTX 3090 24G", 390, 100, 480, 0.175)] + [("RTX 4090 24G", 450, 150, 600, 0.11)] * 3)
COMM_S = 0.08


def demo_gpus(job: bool = True) -> list[GpuPower]:
    return [GpuPower(index=i, uuid=f"GPU-{i}", tier=tier, cap_w=default, default_w=default, min_w=low, max_w=high,
                     compute_s=compute if job else None, comm_s=COMM_S if job else 0.0)
            for i, (tier, default, low, high, compute) in enumerate(DEMO)]


def new_caps(fit) -> dict[int, float]:
    return {p.index: p.new_w for p in fit.proposals}


def test_demo_budget_cuts_only_the_waiting_cards() -> None:
    gpus = demo_gpus()
    fit = fit_to_budget(gpus, 2800)
    caps = new_caps(fit)
    assert fit.caps_before_w == 3300 and sum(caps.values()) <= 2800 and fit.caps_after_w <= 2800
    assert [caps[i] for i in (0, 1, 2)] == [170.0] * 3  # the straggler tier keeps every watt
    assert sum(caps[i] for i in range(3, 10)) <= 2800 - 510
    assert fit.throughput_kept == 1.0
    assert fit.step_before_s == fit.step_after_s == pytest.approx(0.40 + COMM_S)
    reasons = {p.index: p.reason for p in fit.proposals}
    assert reasons[0].startswith("unchanged")
    assert any("waits" in reasons[i] for i in range(3, 10))


def test_the_straggler_keeps_its_watts_as_long_as_the_budget_allows() -> None:
    gpus = demo_gpus()
    floor_of_fast = sum(g.min_w for g in gpus[3:])  # every fast card at its minimum
    fit = fit_to_budget(gpus, floor_of_fast + 510)
    caps = new_caps(fit)
    assert [caps[i] for i in (0, 1, 2)] == [170.0] * 3
    assert all(caps[g.index] == g.min_w for g in gpus[3:])
    assert fit.throughput_kept == 1.0
    tighter = fit_to_budget(gpus, floor_of_fast + 450)  # now the straggler must give
    caps = new_caps(tighter)
    assert sum(caps[i] for i in (0, 1, 2)) == pytest.approx(450)
    assert tighter.throughput_kept < 1.0 and tighter.step_after_s > tighter.step_before_s
    assert "paces the job" in tighter.proposals[0].reason


def test_fast_cards_at_their_minimum_can_become_the_pace() -> None:
    # a 4090 that is only a little faster than the 3060: cutting it to the bone would make it the straggler
    gpus = [GpuPower(0, "a", "RTX 3060 12G", 170, 170, 100, 200, compute_s=0.40, comm_s=0.05),
            GpuPower(1, "b", "RTX 4090 24G", 450, 450, 150, 600, compute_s=0.36, comm_s=0.05)]
    fit = fit_to_budget(gpus, 420)
    caps = new_caps(fit)
    assert sum(caps.values()) <= 420
    # the cut is shared so that neither card alone paces much slower than needed
    assert caps[0] < 170 and caps[1] < 450
    assert 0.85 < fit.throughput_kept < 1.0
    assert fit.throughput_kept == pytest.approx(fit.step_before_s / fit.step_after_s)


def test_budget_already_met_changes_nothing() -> None:
    fit = fit_to_budget(demo_gpus(), 4000)
    assert all(p.new_w == p.old_w for p in fit.proposals) and fit.throughput_kept == 1.0
    assert fit.caps_after_w == fit.caps_before_w == 3300


def test_caps_above_max_are_brought_into_range() -> None:
    gpu = GpuPower(0, "a", "x", cap_w=650, default_w=450, min_w=150, max_w=600)
    fit = fit_to_budget([gpu], 1000)
    assert fit.proposals[0].new_w == 600


@pytest.mark.parametrize("budget", [1149, 1000, 0.5])
def test_budget_below_the_sum_of_minimums_is_one_line(budget: float) -> None:
    with pytest.raises(BudgetError) as refused:
        fit_to_budget(demo_gpus(), budget)
    message = str(refused.value)
    assert "below the sum of the cards' minimum caps (1150 W)" in message and "\n" not in message


@pytest.mark.parametrize("budget", [0, -100])
def test_budget_must_be_positive(budget: float) -> None:
    with pytest.raises(BudgetError, match="must be positive"):
        fit_to_budget(demo_gpus(), budget)


def test_without_a_job_the_cost_is_spread_by_the_standalone_model() -> None:
    gpus = demo_gpus(job=False)
    fit = fit_to_budget(gpus, 2800)
    caps = new_caps(fit)
    assert sum(caps.values()) <= 2800 and fit.step_before_s is None and fit.step_after_s is None
    cut = {g.index: g.cap_w - caps[g.index] for g in gpus}
    assert all(cut[i] > 0 for i in cut)  # every card gives some: no card's watts are free
    share = {g.index: cut[g.index] / g.cap_w for g in gpus}  # spread in proportion, not taken from one card
    assert max(share.values()) - min(share.values()) < 0.04
    expected = sum(power_factor(caps[g.index], g.default_w) * g.default_w for g in gpus) / sum(g.default_w for g in gpus)
    assert fit.throughput_kept == pytest.approx(expected, abs=1e-3)
    assert 0.95 < fit.throughput_kept < 1.0
    assert all("throughput cost" in p.reason for p in fit.proposals)


def test_two_identical_cards_without_a_job_share_the_cut() -> None:
    gpus = [GpuPower(i, f"u{i}", "RTX 3090 24G", 350, 350, 100, 400) for i in range(2)]
    fit = fit_to_budget(gpus, 600)
    assert sorted(new_caps(fit).values()) == [300.0, 300.0]


def test_cards_outside_the_job_give_up_watts_first() -> None:
    # an evenly balanced job (no rank waits): every watt taken from a rank costs; the idle card's cost nothing
    gpus = [GpuPower(i, f"GPU-{i}", "RTX 3090 24G", 350, 350, 100, 400, compute_s=0.2, comm_s=0.05) for i in range(3)]
    idle = GpuPower(3, "GPU-3", "RTX 3090 24G", 350, 350, 100, 400)  # not in the running job
    fit = fit_to_budget([*gpus, idle], 1400 - 250)
    caps = new_caps(fit)
    assert caps[3] == 100.0 and all(caps[g.index] == g.cap_w for g in gpus)
    assert fit.throughput_kept == 1.0
    assert "not in the running job" in fit.proposals[3].reason
    fit = fit_to_budget([*gpus, idle], 1400 - 280)  # past the idle card's minimum the ranks share the rest
    caps = new_caps(fit)
    assert caps[3] == 100.0 and sum(350 - caps[i] for i in range(3)) == pytest.approx(30)
    assert fit.throughput_kept < 1.0


def test_to_json_shape() -> None:
    data = fit_to_budget(demo_gpus(), 2800).to_json()
    assert set(data) == {"budget_w", "caps_before_w", "caps_after_w", "step_before_s", "step_after_s",
                         "throughput_kept", "gpus"}
    assert set(data["gpus"][0]) == {"index", "uuid", "tier", "old_w", "new_w", "reason", "basis", "above_stock"}


@st.composite
def gpu_sets(draw: st.DrawFn) -> tuple[list[GpuPower], float]:
    count = draw(st.integers(1, 10))
    in_job = draw(st.booleans())
    comm = draw(st.floats(0.0, 0.3))
    gpus = []
    for index in range(count):
        low = draw(st.integers(50, 300))
        default = draw(st.integers(low, low + 400))
        high = draw(st.integers(default, default + 200))
        cap = draw(st.integers(low, high))
        compute = draw(st.floats(0.01, 1.0)) if in_job and draw(st.integers(0, 4)) else None
        gpus.append(GpuPower(index, f"GPU-{index}", f"tier{index % 3}", float(cap), float(default), float(low),
                             float(high), compute_s=compute, comm_s=comm if compute is not None else 0.0))
    floor = sum(g.min_w for g in gpus)
    budget = draw(st.floats(floor, sum(g.cap_w for g in gpus) + 100, allow_nan=False))
    return gpus, budget


@settings(max_examples=150, deadline=None)
@given(gpu_sets())
def test_fit_keeps_ranges_and_meets_the_budget(case: tuple[list[GpuPower], float]) -> None:
    gpus, budget = case
    fit = fit_to_budget(gpus, budget)
    caps = new_caps(fit)
    assert sorted(caps) == [g.index for g in gpus]
    for gpu in gpus:
        assert gpu.min_w <= caps[gpu.index] <= gpu.max_w
        assert caps[gpu.index] <= max(gpu.cap_w, gpu.min_w)  # a fit never raises a cap
    assert sum(caps.values()) <= budget + 1e-6
    assert fit.caps_after_w <= budget + 1e-6
    assert 0.0 < fit.throughput_kept <= 1.0 + 1e-9


# -- the fit's input from a hub snapshot ------------------------------------------------------------


def add_demo_ranks(hub: Hub, computes: list[float], step_s: float = 0.5) -> list[Any]:
    gpus = hub.snapshot()["gpus"]
    keys = []
    for rank, compute in enumerate(computes):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(computes), "job": "demo",
                                          "gpu_uuid": gpus[rank]["uuid"]}))
        for step in range(3):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": step_s, "samples": 64,
                                            "comm_s": step_s - compute, "data_wait_s": 0.0}))
        keys.append(key)
    return keys


def test_gpu_power_from_the_demo_snapshot_with_ranks(demo_hub: Hub) -> None:
    computes = [0.42, 0.41, 0.42, 0.19, 0.19, 0.19, 0.18, 0.12, 0.12]  # no rank on GPU 9
    add_demo_ranks(demo_hub, computes)
    snapshot = demo_hub.snapshot()
    gpus = gpu_power_from_snapshot(snapshot)
    assert [g.index for g in gpus] == list(range(10))
    by_index = {g.index: g for g in gpus}
    assert (by_index[7].cap_w, by_index[7].default_w, by_index[7].min_w, by_index[7].max_w) == (450, 450, 150, 600)
    assert by_index[0].tier == "RTX 3060 12G" and by_index[0].uuid == snapshot["gpus"][0]["uuid"]
    for index, compute in enumerate(computes):
        assert by_index[index].compute_s == pytest.approx(compute)
        assert by_index[index].comm_s == pytest.approx(0.5 - 0.42)  # the slowest rank's wait: the all-reduce
    assert by_index[9].compute_s is None and by_index[9].comm_s == 0.0
    fit = fit_to_budget(gpus, snapshot["power_budget_w"])
    caps = new_caps(fit)
    assert [caps[i] for i in (0, 1, 2)] == [170.0] * 3 and sum(caps.values()) <= 2800
    assert fit.throughput_kept == 1.0


def test_gpu_power_without_ranks_and_with_a_lost_gpu(demo_hardware, clock) -> None:
    from tests.conftest import ticked_hub

    demo_hardware.machine.lost.add(4)
    hub = ticked_hub(demo_hardware, clock)
    gpus = gpu_power_from_snapshot(hub.snapshot())
    assert [g.index for g in gpus] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert all(g.compute_s is None and g.comm_s == 0.0 for g in gpus)


def test_disconnected_ranks_are_ignored(demo_hub: Hub) -> None:
    keys = add_demo_ranks(demo_hub, [0.4, 0.1])
    demo_hub.agent_gone(keys[0])
    gpus = gpu_power_from_snapshot(demo_hub.snapshot())
    assert gpus[0].compute_s is None and gpus[1].compute_s == pytest.approx(0.1)


def test_a_fit_cuts_inside_the_caps_it_measured_before_it_extrapolates_below_them() -> None:
    # GPU 0's curve is learned at 330-350 W and nearly flat there: below 330 W it is extrapolated (cheap
    # on the prior's shape). GPU 1's is learned at 300-350 W and steep (10 % over 50 W). Cutting 60 W:
    # GPU 0 gives its 20 measured watts, then GPU 1 measured watts, and GPU 0 goes below what was measured
    # only while it still waits for GPU 1 under the static-power bound (speed at most in proportion to the
    # watts above 8 % of the default limit: 0.201 x 302/292 s at 320 W against GPU 1's 0.212 s), never on
    # the model's costs alone (GPU 0 to 300 W, GPU 1 to 340 W; before the bound: 330 and 310 W).
    flat = GpuPower(index=0, uuid="GPU-0", tier="RTX 3090 24G", cap_w=350, default_w=350, min_w=100, max_w=400,
                    compute_s=0.2, comm_s=0.0, power_points=((330.0, 0.201),))
    steep = GpuPower(index=1, uuid="GPU-1", tier="RTX 3090 24G", cap_w=350, default_w=350, min_w=100, max_w=400,
                     compute_s=0.2, comm_s=0.0, power_points=((300.0, 0.22),))
    fit = fit_to_budget([flat, steep], 640)
    caps = {p.index: p.new_w for p in fit.proposals}
    assert caps == {0: 320.0, 1: 320.0}
