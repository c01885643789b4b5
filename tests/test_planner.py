"""The batch-split planner: invariants under random rigs, and the mixed rig's figures."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumix.model import priors
from gpumix.plan.padding import with_possible_stairs
from gpumix.plan.planner import (
    MAX_ACCUMULATION_STEPS,
    MAX_GLOBAL_BATCH,
    CommModel,
    PlanError,
    PlanRequest,
    RankMeasure,
    comm_model,
    estimate_mem_per_sample,
    factorize,
    micro_batch_cap,
    plan,
    plan_to_json,
    predict,
)
from gpumix.plan.stairs import with_stairs
from tests.test_plan_exposed_comm import pipeline_wait_s

GIB = 1024**3
HUGE_LINK = 1e15  # comm ~ 0: compute alone decides
MIXED_SPEEDS = [0.45] * 3 + [1.0] * 4 + [1.65] * 3
MIXED_TIERS = ["rtx3060"] * 3 + ["rtx3090"] * 4 + ["rtx4090"] * 3


def mixed_rig(current: list[int] | None = None, **extra) -> list[RankMeasure]:
    current = current or [64] * 10
    return [
        RankMeasure(rank=i, samples_per_s=400 * speed * current[i] / 64, current_samples=current[i],
                    link_bytes_per_s=HUGE_LINK, tier=tier, gpu_uuid=f"GPU-{i}", **extra)
        for i, (speed, tier) in enumerate(zip(MIXED_SPEEDS, MIXED_TIERS, strict=True))
    ]


def test_mixed_rig_near_ideal_and_far_above_equal_split() -> None:
    result = plan(mixed_rig(), PlanRequest(global_batch=640, gradient_bytes=1e8))
    counts = [r.samples for r in result.ranks]
    assert sum(counts) == 640
    assert result.proposed.compute_s <= 1.05 * result.ideal.compute_s
    assert result.current.compute_s >= 1.8 * result.proposed.compute_s
    assert result.speedup >= 1.8
    assert counts[0] < counts[3] < counts[7]  # proportional to speed
    weights = [r.loss_weight for r in result.ranks]
    assert math.isclose(sum(weights), 10)  # sum n_r R / B = R
    doc = plan_to_json(result)
    assert doc["ranks"][0]["samples"] == counts[0] and doc["speedup"] == result.speedup
    assert set(doc) >= {"current", "proposed", "ideal", "speedup", "fast_tier_only"}


def test_compute_share_turns_whole_step_rate_into_compute_speed() -> None:
    # Synchronous DDP: every rank shows the same step time, so whole-step rates only mirror
    # the (equal) split; the compute share tells the speeds apart.
    step_s = 64 / (400 * 0.45)
    measures = [
        RankMeasure(rank=i, samples_per_s=64 / step_s, current_samples=64, link_bytes_per_s=HUGE_LINK,
                    compute_share=(64 / (400 * speed)) / step_s)
        for i, speed in enumerate(MIXED_SPEEDS)
    ]
    result = plan(measures, PlanRequest(global_batch=640, gradient_bytes=1e8))
    assert result.speedup >= 1.8


def test_memory_limited_rank_accumulates_and_says_memory() -> None:
    # The 3060s fit 10 samples per micro-batch at most: they accumulate.
    measures = mixed_rig(mem_total_bytes=12 * GIB)
    measures = [
        RankMeasure(**{**m.__dict__, "micro_batch": 8, "mem_peak_bytes": 8 * GIB if i < 3 else GIB // 2})
        for i, m in enumerate(measures)
    ]
    request = PlanRequest(global_batch=640, gradient_bytes=1e8, memory_safety_margin=0.10)
    assert micro_batch_cap(measures[0], request) == 10  # 12 GiB * 0.9 / 1 GiB per sample
    result = plan(measures, request)
    slow = result.ranks[0]
    assert slow.micro_batch <= 10 and slow.accumulation_steps > 1
    assert slow.micro_batch * slow.accumulation_steps == slow.samples
    assert "memory" in slow.limited_by
    assert "memory" not in result.ranks[7].limited_by


def test_without_accumulation_memory_caps_samples_and_the_rest_move() -> None:
    measures = [
        RankMeasure(**{**m.__dict__, "micro_batch": 8, "mem_total_bytes": 12 * GIB,
                       "mem_peak_bytes": 8 * GIB if i < 3 else GIB // 2})
        for i, m in enumerate(mixed_rig())
    ]
    request = PlanRequest(global_batch=640, gradient_bytes=1e8, max_accumulation_steps=1)
    result = plan(measures, request)
    assert [r.samples for r in result.ranks[:3]] == [10, 10, 10]
    assert all(r.limited_by == ("memory",) for r in result.ranks[:3])
    assert sum(r.samples for r in result.ranks) == 640
    assert result.proposed.step_time_s >= result.ideal.step_time_s


def test_exclusion_and_fast_tier_alternative(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(priors, "PASS_COST_PRIOR_S", 0.0)  # proportional by hand: no pass cost (s14's tests)
    result = plan(mixed_rig(), PlanRequest(global_batch=640, gradient_bytes=1e8,
                                           exclude=frozenset({2})))
    assert result.ranks[2].samples == 0 and result.ranks[2].limited_by == ("excluded",)
    assert result.ranks[2].loss_weight == 0
    assert math.isclose(sum(r.loss_weight for r in result.ranks), 9)
    assert sum(r.samples for r in result.ranks) == 640
    fast = result.fast_tier_only
    assert fast is not None and fast.tier == "rtx4090" and fast.ranks == (7, 8, 9)
    # Three 4090s: 640 / (3 * 660) s of compute, slower than the whole box re-split.
    assert math.isclose(fast.prediction.compute_s, 214 / 660)
    assert fast.prediction.samples_per_s < result.proposed.samples_per_s
    assert plan_to_json(result)["fast_tier_only"]["ranks"] == [7, 8, 9]


def test_slow_chipset_link_makes_fast_tier_win() -> None:
    # The 3060s sit behind an x1 riser: every all-reduce crawls at their pace.
    measures = [RankMeasure(**{**m.__dict__, "link_bytes_per_s": 0.8e9 if i < 3 else 20e9})
                for i, m in enumerate(mixed_rig())]
    result = plan(measures, PlanRequest(global_batch=640, gradient_bytes=1e8))
    assert result.fast_tier_only is not None
    assert result.fast_tier_only.prediction.samples_per_s > result.proposed.samples_per_s


def test_keeps_current_split_when_nothing_is_faster() -> None:
    measures = [RankMeasure(rank=i, samples_per_s=100.0, current_samples=16, link_bytes_per_s=HUGE_LINK)
                for i in range(4)]
    result = plan(measures, PlanRequest(global_batch=64, gradient_bytes=1e8))
    assert result.kept_current and result.note
    assert [r.samples for r in result.ranks] == [16] * 4
    assert result.speedup == 1.0


def test_mem_per_sample_from_two_points() -> None:
    assert estimate_mem_per_sample([(8, 2 * GIB + 8 * 100e6), (16, 2 * GIB + 16 * 100e6)]) == pytest.approx(100e6)
    noisy = [(4, 2.0e9 + 4.0e8), (8, 2.0e9 + 8.1e8), (16, 2.0e9 + 15.9e8)]
    assert estimate_mem_per_sample(noisy) == pytest.approx(1e8, rel=0.02)
    assert estimate_mem_per_sample([(8, 1e9), (8, 1.1e9)]) is None
    assert estimate_mem_per_sample([(8, 1e9)]) is None


def test_cap_with_per_sample_figure_counts_fixed_memory_once() -> None:
    measure = RankMeasure(rank=0, samples_per_s=1.0, current_samples=8, link_bytes_per_s=1.0, micro_batch=8,
                          mem_total_bytes=10 * GIB, mem_peak_bytes=2 * GIB + 8 * 100 * 2**20,
                          mem_per_sample_bytes=100 * 2**20)
    request = PlanRequest(global_batch=8, gradient_bytes=1.0, memory_safety_margin=0.1)
    assert micro_batch_cap(measure, request) == math.floor((9 * GIB - 2 * GIB) / (100 * 2**20))
    unknown = RankMeasure(**{**measure.__dict__, "mem_per_sample_bytes": None})
    assert micro_batch_cap(unknown, request) < micro_batch_cap(measure, request)  # safe side


# -- properties ---------------------------------------------------------------------------------

@st.composite
def rigs(draw: st.DrawFn) -> tuple[list[RankMeasure], PlanRequest, dict[int, int | None]]:
    ranks = draw(st.integers(1, 8))
    global_batch = draw(st.integers(ranks, 400))
    current = [global_batch // ranks] * ranks
    current[0] += global_batch - sum(current)
    measures = []
    for i in range(ranks):
        micro = current[i]
        peak = draw(st.one_of(st.none(), st.integers(1, 64).map(lambda g: g * 2**28)))
        earlier = draw(st.lists(st.tuples(st.integers(1, 400), st.floats(1e-3, 10.0)), max_size=2))
        measures.append(RankMeasure(
            rank=i, samples_per_s=draw(st.floats(1.0, 2000.0)), current_samples=current[i],
            compute_points=tuple(earlier),
            link_bytes_per_s=draw(st.floats(1e8, 1e11)), micro_batch=micro,
            compute_share=draw(st.one_of(st.none(), st.floats(0.2, 1.0))),
            mem_total_bytes=None if peak is None else peak * draw(st.integers(1, 6)),
            mem_peak_bytes=peak,
            mem_per_sample_bytes=draw(st.one_of(st.none(), st.floats(1e3, 2**28))) if peak else None,
            tier=draw(st.sampled_from(["a", "b", None])),
        ))
    request = PlanRequest(
        global_batch=global_batch, gradient_bytes=draw(st.floats(1e5, 1e9)),
        memory_safety_margin=draw(st.floats(0.0, 0.3)),
        max_micro_batch=draw(st.one_of(st.none(), st.integers(1, 64))),
        granularity=draw(st.sampled_from([g for g in (1, 1, 2, 8) if g <= global_batch])),  # more: refused
        measured_comm_s=draw(st.one_of(st.none(), st.floats(0.0, 1.0))),
    )
    caps = {m.rank: micro_batch_cap(m, request) for m in measures}
    return measures, request, caps


@settings(max_examples=300, deadline=None)
@given(rigs())
def test_plan_invariants(case) -> None:
    measures, request, caps = case
    result = plan(measures, request)
    assert sum(r.samples for r in result.ranks) == request.global_batch
    for r in result.ranks:
        assert r.samples >= 1  # nobody is excluded here
        assert r.micro_batch * r.accumulation_steps == r.samples
        if caps[r.rank] is not None:
            assert r.micro_batch <= caps[r.rank]
    assert result.ideal.step_time_s <= result.proposed.step_time_s * (1 + 1e-9)
    current_fits = all(caps[m.rank] is None or m.micro_batch <= caps[m.rank] for m in measures)
    if current_fits:
        assert result.proposed.step_time_s <= result.current.step_time_s * (1 + 1e-9)
    # The reported figures are the step model's own for the split reported.
    # as the planner reads them: stairs learned (plan.stairs), and the ones a single count cannot show (plan.padding)
    read = with_possible_stairs(with_stairs(measures, request), request)
    again = predict([r.samples for r in result.ranks], read, comm_model(read, request))
    assert math.isclose(again.step_time_s, result.proposed.step_time_s)


@settings(max_examples=150, deadline=None)
@given(rigs(), st.data())
def test_excluded_ranks_get_nothing_and_others_at_least_one(case, data) -> None:
    measures, request, _ = case
    exclude = frozenset(data.draw(st.sets(st.sampled_from([m.rank for m in measures]),
                                          max_size=len(measures) - 1)))
    request = PlanRequest(**{**request.__dict__, "exclude": exclude})
    result = plan(measures, request)
    taking_part = len(measures) - len(exclude)
    assert sum(r.samples for r in result.ranks) == request.global_batch
    for r in result.ranks:
        assert (r.samples == 0) == (r.rank in exclude)
        assert math.isclose(r.loss_weight, r.samples * taking_part / request.global_batch)
    assert result.ideal.step_time_s <= result.proposed.step_time_s * (1 + 1e-9)


def test_accumulating_ranks_keep_micro_batches_at_least_half_the_cap() -> None:
    # n_r above the cap must split into equal micro-batches: a prime n_r would need ones of
    # size 1, so the planner picks counts that split well (B = 23: not 10 + 13 but 8 + 15).
    for global_batch in range(2, 300):
        measures = [RankMeasure(rank=i, samples_per_s=100 * (1 + 0.37 * i), current_samples=0,
                                link_bytes_per_s=HUGE_LINK) for i in range(2)]
        result = plan(measures, PlanRequest(global_batch=global_batch, gradient_bytes=1e6,
                                            max_micro_batch=10))
        assert sum(r.samples for r in result.ranks) == global_batch
        for r in result.ranks:
            assert r.micro_batch <= 10
            assert r.accumulation_steps == 1 or 2 * r.micro_batch >= 10, (global_batch, r)
        assert result.proposed.compute_s <= result.ideal.compute_s + 10 / 100


def test_leaving_the_slow_link_tier_out_is_found_and_beats_the_rest() -> None:
    # The 3060s' slow links pace every all-reduce: the job is fastest without them.
    measures = [RankMeasure(**{**m.__dict__, "link_bytes_per_s": 0.8e9 if i < 3 else 20e9})
                for i, m in enumerate(mixed_rig())]
    result = plan(measures, PlanRequest(global_batch=640, gradient_bytes=1e8))
    without = result.best_without_tier
    assert without is not None and without.tier == "rtx3060" and without.ranks == tuple(range(3, 10))
    assert without.prediction.samples_per_s > result.proposed.samples_per_s
    assert without.prediction.samples_per_s >= result.fast_tier_only.prediction.samples_per_s
    data = plan_to_json(result)
    assert data["without_tier"]["tier_left_out"] == "rtx3060" and data["without_tier"]["speedup_over_current"] > 1


def test_no_tier_left_out_on_one_tier() -> None:
    measures = [RankMeasure(rank=i, samples_per_s=100.0, current_samples=16, link_bytes_per_s=HUGE_LINK, tier="a")
                for i in range(3)]
    assert plan(measures, PlanRequest(global_batch=48, gradient_bytes=1e6)).best_without_tier is None


# -- measured points, granularity, measured communication ----------------------------------------


def h200_pair(points: bool) -> list[RankMeasure]:
    """Compute alone, measured on 2xH200 (benchmarks/split_sweep.py, MLP 8192x4, fp32): GPU 0 free,
    GPU 1 time-sliced with a bf16 matmul loop. Both run 512 now; with `points`, each was also
    measured at the split of an earlier re-plan."""
    earlier = {0: ((640, 0.01942),), 1: ((384, 0.03085),)} if points else {0: (), 1: ()}
    return [RankMeasure(rank=r, samples_per_s=512 / t, current_samples=512, link_bytes_per_s=HUGE_LINK,
                        compute_points=earlier[r]) for r, t in ((0, 0.01375), (1, 0.03532))]


def test_points_from_an_earlier_split_and_whole_tiles_find_the_measured_best(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(priors, "PASS_COST_PRIOR_S", 0.0)  # one pass each: the points' line alone (s14's tests)
    # Measured throughput of each split (same sweep): 768/256 was the best (33 286 samples/s), 819/205
    # the same (33 281); 742/282 ran at 29 349. Proportional from one point says 737/287, on the same
    # stair. With the earlier points and multiples of 64 the planner leaves that stair for 832/192 (not
    # measured: by the sweep's trend 1-2.5 % under the best). Session 25: above its points GPU 0's curve
    # grows in proportion to 640's (768 at 23.3 ms, measured 21.4), where the span's line (25.1 ms) kept
    # it at 768/256; GPU 1's line below its points still prices 256 at 26.4 ms (measured 22.1), so 832/192
    # reads faster. Unfavourable, and in docs/planner.md: better predictions on one side moved the split.
    one_point = plan(h200_pair(points=False), PlanRequest(global_batch=1024, gradient_bytes=8e8))
    assert [r.samples for r in one_point.ranks] == [737, 287]
    request = PlanRequest(global_batch=1024, gradient_bytes=8e8, granularity=64)
    result = plan(h200_pair(points=True), request)
    assert [r.samples for r in result.ranks] == [832, 192]
    assert result.ranks[0].limited_by == ("granularity",)  # above its continuous share, it sets the pace
    assert abs(result.ranks[0].compute_s - 0.01942 * 832 / 640) < 1e-5  # proportional to its last point
    assert result.ideal.compute_s <= result.proposed.compute_s


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(1, 64), st.sampled_from([2, 8, 64]), st.data())
def test_granularity_gives_whole_multiples(ranks, units_per_rank, granularity, data) -> None:
    global_batch = ranks * units_per_rank * granularity + data.draw(st.integers(0, granularity - 1))
    measures = [RankMeasure(rank=i, samples_per_s=data.draw(st.floats(10.0, 1000.0)),
                            current_samples=0, link_bytes_per_s=HUGE_LINK) for i in range(ranks)]
    result = plan(measures, PlanRequest(global_batch=global_batch, gradient_bytes=1e6, granularity=granularity))
    counts = [r.samples for r in result.ranks]
    assert sum(counts) == global_batch
    rest = global_batch % granularity
    assert sum(n % granularity != 0 for n in counts) <= (1 if rest else 0)
    assert all(n % granularity in (0, rest) for n in counts)


def test_granularity_holds_when_a_fast_rank_must_give_up_units() -> None:
    # Five ranks at 10 samples/s and one at 201 share 48 samples in units of 8. Proportional counts are
    # [1, 1, 2, 2, 2, 40]: whole units make 48 only if the fast rank gives up 4 of its 5 units, further
    # than a near window around each count reaches (the old search kept the non-multiples).
    measures = [RankMeasure(rank=i, samples_per_s=speed, current_samples=0, link_bytes_per_s=HUGE_LINK)
                for i, speed in enumerate([10.0] * 5 + [201.0])]
    result = plan(measures, PlanRequest(global_batch=48, gradient_bytes=1e6, granularity=8))
    assert [r.samples for r in result.ranks] == [8] * 6


def test_measured_communication_replaces_the_link_model() -> None:
    # The current split measured 0.40 s a step, its slowest rank computing 0.3556 s: 0.044 s waits,
    # over links whose prior all-reduce (0.225 s) is no shorter than the one the wait says.
    measures = [RankMeasure(**{**m.__dict__, "link_bytes_per_s": 0.8e9}) for m in mixed_rig()]
    slowest = 64 / (400 * 0.45)
    request = PlanRequest(global_batch=640, gradient_bytes=1e8, measured_comm_s=0.40 - slowest)
    result = plan(measures, request)
    assert math.isclose(result.current.step_time_s, 0.40)
    # A wait of 0.044 s behind a 0.237 s backward is what the third 25 MiB bucket of 1e8 bytes sets
    # (a 0.1998 s all-reduce: links just slower than the backward produces that bucket); the proposal's
    # shorter compute hides less of it, as DDP's bucket pipeline runs it (the overlap prior).
    low, high = 0.0, 1.0
    for _ in range(100):  # the all-reduce whose pipeline waits 0.044 s at the current compute
        middle = (low + high) / 2
        low, high = (middle, high) if pipeline_wait_s(slowest, middle, 1e8) < 0.40 - slowest else (low, middle)
    assert math.isclose(low, 0.1998, abs_tol=1e-4)
    assert math.isclose(result.proposed.allreduce_s, pipeline_wait_s(result.proposed.compute_s, low, 1e8), rel_tol=1e-6)
    assert result.proposed.allreduce_s > 0.40 - slowest
    # Leaving ranks out scales it by the link model: the slow-link tier's absence shortens it.
    slow_links = [RankMeasure(**{**m.__dict__, "link_bytes_per_s": 0.8e9 if i < 3 else 20e9})
                  for i, m in enumerate(measures)]
    result = plan(slow_links, request)
    assert result.best_without_tier is not None
    assert result.best_without_tier.prediction.allreduce_s < 0.1 * (0.40 - slowest)


def test_comm_model_without_a_measurement_is_the_link_model() -> None:
    model = CommModel(gradient_bytes=1e8)
    assert math.isclose(model.seconds([1e9, 2e9]), 2 * 1 / 2 * 1e8 / 1e9)
    assert CommModel(1e8, measured_s=0.05, measured_links=(1e9, 1e9)).seconds([1e9]) == 0.0  # one rank


# -- absurd requests: refused in one line, never searched (issue 10, item 10) ---------------------


def four_ranks(**extra) -> list[RankMeasure]:
    return [RankMeasure(rank=i, samples_per_s=100.0 * (i + 1), current_samples=32, link_bytes_per_s=1e10,
                        tier=f"t{i % 2}", **extra) for i in range(4)]


@pytest.mark.parametrize(("changes", "says"), [
    ({"global_batch": 10**30}, "global batch 1000000000000000000000000000000: must be 1 to 10000000"),
    ({"global_batch": 10**12}, "must be 1 to 10000000 samples per step"),
    ({"global_batch": 0}, "global batch 0: must be 1 to"),
    ({"gradient_bytes": math.inf}, "gradient size inf bytes"),
    ({"gradient_bytes": math.nan}, "gradient size nan bytes"),
    ({"gradient_bytes": -1.0}, "gradient size -1.0 bytes"),
    ({"granularity": 1_000_000}, "granularity 1000000: must be 1 to the global batch (128)"),
    ({"exclude": frozenset({99})}, "excluded ranks [99] are not in the job (ranks [0, 1, 2, 3])"),
    ({"exclude": frozenset(range(4))}, "every rank is excluded"),
    ({"measured_comm_s": -1e308}, "measured communication"),
])
def test_absurd_requests_are_refused_in_one_line(changes, says) -> None:
    request = PlanRequest(**{"global_batch": 128, "gradient_bytes": 1e8, **changes})
    with pytest.raises(PlanError) as refused:
        plan(four_ranks(), request)
    assert says in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("field", "value"), [
    ("current_samples", 10**30), ("samples_per_s", math.inf), ("samples_per_s", 1e-308), ("samples_per_s", math.nan),
    ("link_bytes_per_s", math.nan), ("compute_points", ((10**30, 1.0),)), ("compute_points", ((64, math.inf),)),
])
def test_absurd_measurements_are_refused_naming_the_rank(field, value) -> None:
    measures = four_ranks()
    measures[2] = RankMeasure(**{**measures[2].__dict__, field: value})
    with pytest.raises(PlanError, match=r"^rank 2: .*not a plausible measurement$"):
        plan(measures, PlanRequest(global_batch=128, gradient_bytes=1e8))


def test_more_samples_than_memory_and_accumulation_allow_is_refused() -> None:
    # 10 samples fit per micro-batch: 40 000 samples on two ranks would take 2 000 accumulation
    # steps each; the planner accumulates at most MAX_ACCUMULATION_STEPS unless told otherwise.
    measures = [RankMeasure(rank=i, samples_per_s=100.0, current_samples=8, link_bytes_per_s=1e10, micro_batch=8,
                            mem_total_bytes=12 * GIB, mem_peak_bytes=8 * GIB) for i in range(2)]
    request = PlanRequest(global_batch=40_000, gradient_bytes=1e8)
    assert micro_batch_cap(measures[0], request) == 10
    with pytest.raises(ValueError, match=r"does not fit: memory and at most 1024 accumulation steps allow 20480"):
        plan(measures, request)
    fits = plan(measures, PlanRequest(global_batch=20_000, gradient_bytes=1e8))
    assert all(r.micro_batch <= 10 and r.accumulation_steps <= MAX_ACCUMULATION_STEPS for r in fits.ranks)


def test_the_largest_batch_allowed_plans_with_memory_and_whole_tiles() -> None:
    # At the ceiling, with memory caps that need accumulation and a granularity: a plan, not a hang.
    measures = [RankMeasure(rank=i, samples_per_s=100.0 * (1 + i % 3), current_samples=32, micro_batch=32,
                            link_bytes_per_s=1e10, mem_total_bytes=80 * GIB, mem_peak_bytes=GIB + 32 * 10 * 2**20,
                            mem_per_sample_bytes=10 * 2**20, tier=f"t{i % 3}") for i in range(16)]
    result = plan(measures, PlanRequest(global_batch=MAX_GLOBAL_BATCH - 3, gradient_bytes=1e8, granularity=7))
    assert sum(r.samples for r in result.ranks) == MAX_GLOBAL_BATCH - 3
    assert all(r.micro_batch * r.accumulation_steps == r.samples for r in result.ranks)


def test_a_search_past_its_time_limit_is_refused() -> None:
    with pytest.raises(PlanError, match="ran past 0 s and was stopped"):
        plan(mixed_rig(), PlanRequest(global_batch=640, gradient_bytes=1e8), time_limit_s=0.0)


# -- what the search assumes between measured splits (issue 16: stairs finer than the granularity) --


def two_ranks(speeds: tuple[float, float], current: tuple[int, int] = (128, 128),
              points: tuple[tuple[tuple[int, float], ...], ...] = ((), ())) -> list[RankMeasure]:
    return [RankMeasure(rank=i, samples_per_s=speed, current_samples=n, link_bytes_per_s=HUGE_LINK,
                        micro_batch=n, compute_points=p)
            for i, (speed, n, p) in enumerate(zip(speeds, current, points, strict=True))]


def test_whole_tiles_per_pass_pick_the_micro_batch() -> None:
    # 240 samples under a cap of 133 in tiles of 16: 3 x 80 (15 tiles), not 2 x 120 (8 + 8 = 16).
    result = plan(two_ranks((3.0, 1.0)), PlanRequest(global_batch=320, gradient_bytes=1e8, granularity=16,
                                                     max_micro_batch=133))
    assert [r.samples for r in result.ranks] == [240, 80]
    assert (result.ranks[0].micro_batch, result.ranks[0].accumulation_steps) == (80, 3)
    # without a granularity, the largest micro-batch as before
    plain = plan(two_ranks((3.0, 1.0)), PlanRequest(global_batch=320, gradient_bytes=1e8, max_micro_batch=133))
    assert (plain.ranks[0].micro_batch, plain.ranks[0].accumulation_steps) == (120, 2)


def test_a_wasted_tile_against_more_passes_weighs_the_pass_cost() -> None:
    # Issue 16 (oracle, gen-06 at 16): 176 under a cap of 133 as 2 x 88 is 12 tiles of 16; as 11 passes
    # of one tile it is 11. Which is faster is the passes' cost, in samples of the rank's compute: a
    # pass of ~5 ms (priors.PASS_COST_PRIOR_S) is 3.4 samples of a 4090 computing 128 in 0.2 s:
    # 192 + 2 x 3.4 = 198.8 against 176 + 11 x 3.4 = 213.4; at 1 sample a pass, 194 against 187.
    assert factorize(176, 133, MAX_ACCUMULATION_STEPS, 16, 3.4) == (88, 2)
    assert factorize(176, 133, MAX_ACCUMULATION_STEPS, 16, 1.0) == (16, 11)
    assert factorize(208, 133, MAX_ACCUMULATION_STEPS, 16, 3.4) == (104, 2)  # 230.8 against 252.2
    assert factorize(208, 133, MAX_ACCUMULATION_STEPS, 16, 1.0) == (16, 13)  # 226 against 221
    # At granularity 4, the count's own alignment (168 = 8 x 21) is a tile only guessed: a pass is
    # padded on average over tiles of 4 and 8, so 3 x 56 (168, + 3 passes) against 2 x 84 (84 or 88:
    # 172, + 2 passes): 178.2 against 178.8 at 3.4; 172 (aligned to 4) stays 2 x 86 (43 passes of 4
    # would save nothing).
    assert factorize(168, 133, MAX_ACCUMULATION_STEPS, 4, 3.4) == (56, 3)
    assert factorize(168, 133, MAX_ACCUMULATION_STEPS, 4, 4.0) == (84, 2)  # 180 against 180: fewer passes
    assert factorize(172, 133, MAX_ACCUMULATION_STEPS, 4, 3.4) == (86, 2)
    # the planner's micro-batch reaches the plan, at the rank's own pass cost: this rank computes 3
    # samples a second, so a pass of 5.4 ms is 0.016 samples and 11 passes of one tile win
    result = plan(two_ranks((3.0, 1.0)), PlanRequest(global_batch=224, gradient_bytes=1e8, granularity=16,
                                                     max_micro_batch=133))
    assert [(r.samples, r.micro_batch, r.accumulation_steps) for r in result.ranks][0] == (176, 16, 11)
    # an alignment wider than MAX_ALIGNED_TILE buys no passes: 160 (32 x 5) stays 2 x 80
    assert factorize(160, 133, MAX_ACCUMULATION_STEPS, 16, 1.0) == (80, 2)
    assert factorize(208, 133, MAX_ACCUMULATION_STEPS) == (104, 2)


def test_a_split_on_the_measured_lattice_within_the_tolerance_is_preferred() -> None:
    # Measured at 128 each; the line's best in multiples of 4 is 124/132 (1.8 % faster than 128/128),
    # but 132 may sit a stair above 128: within LATTICE_TOLERANCE the planner keeps the lattice.
    result = plan(two_ranks((1.0, 1.05)), PlanRequest(global_batch=256, gradient_bytes=1e8, granularity=4))
    assert [r.samples for r in result.ranks] == [128, 128] and result.kept_current
    assert not plan(two_ranks((1.0, 1.05)), PlanRequest(global_batch=256, gradient_bytes=1e8)).kept_current


def test_a_gain_beyond_the_tolerance_leaves_the_lattice_as_little_as_it_can() -> None:
    # 20 % faster: 128/128 is 6.7 % slower than the best in fours (116/140), past the tolerance; the
    # best in eights (112/144 or 120/136) is within it.
    result = plan(two_ranks((1.0, 1.2)), PlanRequest(global_batch=256, gradient_bytes=1e8, granularity=4))
    counts = [r.samples for r in result.ranks]
    assert all(n % 8 == 0 for n in counts) and counts != [128, 128], counts
    assert max(r.compute_s for r in result.ranks) <= 116.7 * 1.03


def test_a_gain_within_the_curves_own_error_keeps_the_split() -> None:
    # Rank 0 was measured at 120 and 128 and runs 136 now: the line through them said 1.06 s, it
    # measured 1.20 (a stair: 13 % off). Rank 1 (120 samples in 1.15 s) can take little more, so the
    # best re-plan gains about 1 %: within the curves' own error, the split is kept.
    points = (((120, 0.94), (128, 1.0)), ())
    measures = two_ranks((136 / 1.20, 120 / 1.15), current=(136, 120), points=points)
    result = plan(measures, PlanRequest(global_batch=256, gradient_bytes=1e8))
    assert result.kept_current and "within the curves' own error" in (result.note or "")
    assert [r.samples for r in result.ranks] == [136, 120]
    # the same split without earlier points to check the curve against: the re-plan stands
    fresh = plan(two_ranks((136 / 1.20, 120 / 1.15), current=(136, 120)),
                 PlanRequest(global_batch=256, gradient_bytes=1e8))
    assert not fresh.kept_current and fresh.speedup > 1
