"""A stair probe (issue 16, session 23): a few steps at counts near each rank's split within one process.

The schedule keeps every step's global batch (agent/probe_schedule.py); the sampler cuts the same global
batches at the probe's places, every sample once an epoch (agent/batch_split.py); the hub turns each
run of steps at one count into a point marked "probe" (gpumix/hub/count_runs.py), carried across a
restart like an operating point; the planner draws its curves through such points but never judges
their error by them (gpumix/plan/prediction.py hindsight_error)."""

from __future__ import annotations

from typing import Any

import pytest

from gpumix.agent.batch_split import GlobalBatchSampler
from gpumix.agent.probe_schedule import probe_micro_batch, probe_splits, probe_steps
from gpumix.hub import Hub
from gpumix.hub.count_runs import MIN_STEPS, SETTLE_STEPS
from gpumix.hub.ranks import POINTS_KEPT, parse_hello, parse_step
from gpumix.hw.hardware import Hardware
from gpumix.plan.inputs import measures
from gpumix.plan.prediction import hindsight_error
from gpumix.plan.split_types import RankMeasure
from tests.conftest import ManualClock, ticked_hub

# -- the schedule and the sampler ------------------------------------------------------------------


@pytest.mark.parametrize("counts", [[64, 64], [64, 64, 64], [32, 48, 64, 8, 16], [4, 8, 4, 4]])
def test_every_probe_split_keeps_the_global_batch_and_each_rank_moves_both_ways(counts: list[int]) -> None:
    splits = probe_splits(counts, 4)
    assert splits and all(sum(split) == sum(counts) and min(split) >= 4 for split in splits)
    for rank, n in enumerate(counts):
        seen = {split[rank] for split in splits}
        expected = {n + 4 * j for j in (-2, -1, 1, 2) if n + 4 * j >= 4}
        # a trade that would leave either rank of a pair under a granule is left out
        assert seen - {n} <= expected
        if n >= 12 and all(m >= 12 for m in counts):
            assert seen - {n} == expected, (rank, seen)


def test_one_rank_or_one_granule_each_has_no_probe_and_each_split_runs_its_steps() -> None:
    assert probe_splits([64], 4) == [] and probe_steps([64], 4) == []
    assert probe_splits([4, 4, 4], 4) == []  # no rank can give a granule and keep one
    steps = probe_steps([64, 64], 4, steps_per_split=6)
    assert len(steps) == 24 and steps[:6] == [[68, 60]] * 6 and steps[6:12] == [[60, 68]] * 6
    assert steps[18:] == [[56, 72]] * 6


def test_the_sampler_trains_every_sample_once_an_epoch_through_a_probe() -> None:
    """Three ranks, 10 steps an epoch, a probe over the first 7 steps: each step's slices are disjoint,
    make the whole global batch, and the epoch covers what the unprobed epoch covers; later epochs,
    and a resume past the probe, are the plain split's."""
    counts, dataset = [8, 12, 4], 245
    schedule = probe_steps(counts, 2, steps_per_split=1)
    assert len(schedule) == 7 and all(split != counts for split in schedule)  # rank 2 cannot give 4 of its 4
    for epoch in (0, 1):
        probed = [GlobalBatchSampler(dataset, counts, r, seed=3, epoch=epoch, step_splits=schedule) for r in range(3)]
        plain = [GlobalBatchSampler(dataset, counts, r, seed=3, epoch=epoch) for r in range(3)]
        per_rank = [list(s.steps()) for s in probed]
        for step, slices in enumerate(zip(*per_rank, strict=True)):
            assert [len(s) for s in slices] == (schedule[step] if epoch == 0 and step < 7 else counts)
            together = [i for s in slices for i in s]
            assert len(set(together)) == 24
            assert sorted(together) == sorted(i for s in plain for i in list(s.steps())[step])
        for rank in range(3):
            assert len(probed[rank]) == sum(len(s) for s in per_rank[rank]) == len(list(probed[rank]))
        run_step = epoch * probed[0].steps_per_epoch  # each epoch's first step, counted over the run
        assert [probed[0].probing(run_step + step) for step in range(9)] == [epoch == 0] * 7 + [False] * 2
    resumed = GlobalBatchSampler.resumed(dataset, counts, 1, 9, seed=3, step_splits=schedule)
    assert list(resumed.steps()) == [list(GlobalBatchSampler(dataset, counts, 1, seed=3).steps())[9]]


def test_a_probe_count_runs_in_one_pass_where_it_fits_else_in_even_passes_no_larger_than_now() -> None:
    gib = 1024**3
    assert probe_micro_batch(56, 64) == 56  # under the split's micro-batch: one pass
    assert probe_micro_batch(72, 64, 10 * gib, 24 * gib) == 72  # 11.25 GiB of 24: fits
    assert probe_micro_batch(72, 64, 20 * gib, 24 * gib) == 36  # 22.5 GiB of 24: over 90 %, two of 36
    assert probe_micro_batch(72, 64) == 36  # memory unknown (a CPU): even passes
    assert probe_micro_batch(68, 32) == 17  # four of 17, not 32 + 32 + 4
    assert probe_micro_batch(67, 32) == 32  # a prime count: 32 + 32 + 3, not 67 passes of one
    for n in range(41, 200):  # never a pass over the split's micro-batch, never over twice its passes
        m = probe_micro_batch(n, 40)
        assert m <= 40 and -(-n // m) <= 2 * -(-n // 40), (n, m)


@pytest.mark.parametrize("split", [[8, 12], [8, 12, 5], [0, 20, 4], [10, 10, 4, 0]])
def test_a_probe_split_that_is_not_the_global_batch_is_refused(split: list[int]) -> None:
    with pytest.raises(ValueError, match="probe's split"):
        GlobalBatchSampler(100, [8, 12, 4], 0, step_splits=[[8, 12, 4], split])


# -- the hub's points --------------------------------------------------------------------------------


def _steps(hub: Hub, key: Any, counts: list[int], first_step: int, step_s: float = 0.1) -> None:
    """A rank's steps at these counts: compute 1 ms a sample plus 20 ms, comm 10 ms; each run's first step
    at a count takes 5x as long (a new shape's first run)."""
    steps, previous = [], None
    for index, n in enumerate(counts):
        compute = 0.02 + 0.001 * n
        if n != previous:
            compute *= 5
        previous = n
        steps.append(parse_step({"step": first_step + index, "samples": n, "micro_batch": n, "step_time_s": compute + 0.01,
                                 "comm_s": 0.01, "mem_peak_bytes": 1e9 + 1e6 * n}))
    hub.agent_steps(key, steps)


def _hello(hub: Hub, pid: int) -> Any:
    return hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "probe", "pid": pid, "nvml_index": 0}))


def test_each_run_at_another_count_leaves_a_probe_point_and_the_open_run_none(
        demo_hardware: Hardware, clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    key = _hello(hub, 100)
    _steps(hub, key, [64] * 6 + [68] * 6 + [60] * 6 + [72] * (SETTLE_STEPS + MIN_STEPS - 1) + [64] * 30, 0)
    hub.tick()
    [rank] = hub.snapshot()["ranks"]
    points = {p["samples"]: p for p in rank["points"]}
    # 72 ran one step too few; 64's second run is the split running now (the rank row, not a point)
    assert sorted(points) == [60, 64, 68]
    assert all(p["probe"] is True for p in points.values())
    for n, p in points.items():  # the first step at each count (5x) left out
        assert p["compute_s"] == pytest.approx(0.02 + 0.001 * n)
        assert p["micro_batch"] == n and p["mem_peak_bytes"] == pytest.approx(1e9 + 1e6 * n)
    assert rank["compute_s"] == pytest.approx(0.084)


def test_a_restart_carries_the_probe_points_and_adds_the_split_as_no_probe(
        demo_hardware: Hardware, clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    key = _hello(hub, 100)
    _steps(hub, key, [64] * 6 + [68] * 6 + [60] * 6 + [64] * 30, 0)
    hub.agent_gone(key)
    key = _hello(hub, 101)
    _steps(hub, key, [80] * 30, 48)
    hub.tick()
    [rank] = hub.snapshot()["ranks"]
    points = {p["samples"]: p.get("probe", False) for p in rank["points"]}
    assert points == {68: True, 60: True, 64: False}
    measure = {m.rank: m for m in measures(hub.snapshot(), "probe")}[0]
    assert dict(zip([n for n, _ in measure.compute_points], measure.compute_point_probed, strict=True)) == points


def test_points_stay_bounded_one_a_count_and_the_newest_wins(demo_hardware: Hardware, clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    key = _hello(hub, 100)
    counts = [n for n in range(40, 40 + 4 * (POINTS_KEPT + 4), 4) for _ in range(6)] + [44] * 6 + [200] * 6
    _steps(hub, key, counts, 0)
    hub.tick()
    [rank] = hub.snapshot()["ranks"]
    samples = [p["samples"] for p in rank["points"]]
    assert len(samples) == POINTS_KEPT and len(set(samples)) == POINTS_KEPT and samples[-1] == 44


# -- the planner -------------------------------------------------------------------------------------


def _measure(probed: tuple[bool, ...]) -> RankMeasure:
    """Running 64 at 0.1 s; points at 68 and 72 on the next stair (0.2 s): a line through them says
    64 costs far less than it measured."""
    return RankMeasure(rank=0, samples_per_s=640.0, current_samples=64, link_bytes_per_s=1e10,
                       compute_points=((68, 0.2), (72, 0.2)), compute_point_probed=probed)


def test_a_probes_points_never_judge_the_curves_error() -> None:
    assert hindsight_error([_measure((False, False))]) == pytest.approx(1.0)  # two earlier splits: judged
    assert hindsight_error([_measure((True, True))]) is None  # a probe's: no split to judge by
    assert hindsight_error([_measure(())]) == pytest.approx(1.0)  # no flags (an older hub): splits


def test_a_probe_point_is_the_median_of_its_steps_own_computes(demo_hardware: Hardware, clock: ManualClock) -> None:
    """A rank whose partner paces some steps: its computes are 0.10-0.20 s (median 0.10), the steps and
    the comm waits move together. The medians' difference of a rank row would read 0.25 - 0.05 = 0.20 s."""
    hub = ticked_hub(demo_hardware, clock)
    key = _hello(hub, 100)
    computes, steps = [0.1, 0.1, 0.2, 0.1, 0.11], [0.4, 0.4, 0.25, 0.15, 0.16]
    messages = [{"step": 0, "samples": 60, "step_time_s": 1.0, "comm_s": 0.0}]  # the settling step
    messages += [{"step": 1 + i, "samples": 60, "step_time_s": s, "comm_s": round(s - c, 2)}
                 for i, (c, s) in enumerate(zip(computes, steps, strict=True))]
    messages += [{"step": 6 + i, "samples": 64, "step_time_s": 0.2, "comm_s": 0.05} for i in range(10)]
    hub.agent_steps(key, [parse_step(m) for m in messages])
    hub.tick()
    [rank] = hub.snapshot()["ranks"]
    [point] = rank["points"]
    assert point["samples"] == 60 and point["compute_s"] == pytest.approx(0.10)
