"""The hub's per-tick rows made with fewer calls (issue 13) say exactly what the plain code said.

Each fast path is checked against the code it replaced, kept here as the reference: a rank row's medians
(one column per field, one sort each) on random windows with absent values, zero step times, short and
empty windows; a flat record's row (its __dict__ copied) and the host row
(without dataclasses.asdict) against asdict; the field lessons' number check against the old one.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from typing import Any

import pytest

from gpumix.advice.field import _num
from gpumix.hub.ranks import MEDIAN_WINDOW, RankStream, parse_step, rank_summary
from gpumix.hub.snapshot import host_row, plain
from gpumix.hw.host import HostSample, ProcessSample
from gpumix.hw.types import GpuInfo, GpuProcess, GpuSample
from gpumix.wire.snapshot_types import RANK_LAST_STEP_FIELDS


def _old_median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def old_figures(stream: RankStream) -> dict[str, Any]:
    """rank_summary's figures as the code before the fast path made them."""
    recent = list(stream.steps)[-MEDIAN_WINDOW:]
    step_time = _old_median([s["step_time_s"] for s in recent if s["step_time_s"]])
    figures = {name: _old_median([s[name] for s in recent if s[name] is not None])
               for name in ("samples", "comm_s", "data_wait_s", "tokens", "forward_s", "backward_s", "optimizer_s")}
    last = recent[-1] if recent else {}
    compute = None
    if step_time is not None:
        compute = max(0.0, step_time - (figures["comm_s"] or 0.0) - (figures["data_wait_s"] or 0.0))
    return {"step_time_s": step_time, "compute_s": compute, "samples": figures["samples"],
            "forward_s": figures["forward_s"], "backward_s": figures["backward_s"],
            "optimizer_s": figures["optimizer_s"], **{name: last.get(name) for name in RANK_LAST_STEP_FIELDS if name != "loss"},  # the row's loss: the newest received
            "samples_per_s": figures["samples"] / step_time if figures["samples"] is not None and step_time else None,
            "comm_share": min(1.0, figures["comm_s"] / step_time) if figures["comm_s"] is not None and step_time else None}


def stream_with(steps: list[dict[str, Any]]) -> RankStream:
    stream = RankStream(rank=0, world_size=2, local_rank=0, pid=1, hostname="box", gpu_uuid="GPU-0",
                        nvml_index=0, job="j", env={}, versions={})
    stream.steps.extend(steps)
    return stream


def random_step(rng: random.Random, index: int) -> dict[str, Any]:
    def maybe(value: float) -> float | None:
        return None if rng.random() < 0.3 else value
    message: dict[str, Any] = {"step": index, "step_time_s": rng.choice([0.0, rng.uniform(0.001, 2.0)])}
    for name, value in (("samples", rng.choice([16, 32, 33])), ("comm_s", rng.uniform(0, 0.5)),
                        ("data_wait_s", rng.uniform(0, 0.1)), ("tokens", rng.uniform(1, 1e5)),
                        ("forward_s", rng.uniform(0, 1)), ("backward_s", rng.uniform(0, 1)),
                        ("optimizer_s", rng.uniform(0, 0.1)), ("loss", rng.uniform(0, 5)), ("cpu_pct", rng.uniform(0, 300))):
        if (kept := maybe(value)) is not None:
            message[name] = kept
    step = parse_step(message)
    step.pop("rejected")
    return step


@pytest.mark.parametrize("seed", range(40))
def test_rank_row_figures_are_the_old_codes_on_random_windows(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 2, 3, MEDIAN_WINDOW - 1, MEDIAN_WINDOW, MEDIAN_WINDOW + 1, 60, 200])
    stream = stream_with([random_step(rng, index) for index in range(count)])
    row = rank_summary(stream)
    for name, expected in old_figures(stream).items():
        assert row[name] == expected, (name, count)


def test_a_rank_without_steps_has_no_figures() -> None:
    row = rank_summary(stream_with([]))
    assert all(row[name] is None for name in (*RANK_LAST_STEP_FIELDS, "step_time_s", "compute_s", "samples"))


def test_even_windows_take_the_middle_pair_and_zero_step_times_are_left_out() -> None:
    steps = [{**random_step(random.Random(0), i), "step_time_s": t, "samples": n}
             for i, (t, n) in enumerate([(0.0, 10.0), (0.2, 20.0), (0.4, 30.0), (0.9, 40.0)])]
    row = rank_summary(stream_with(steps))
    assert row["step_time_s"] == 0.4  # 0.2, 0.4, 0.9: the zero one tells nothing
    assert row["samples"] == 25.0  # 10, 20, 30, 40: the middle pair's mean


def test_plain_rows_are_asdicts_for_every_record_kind() -> None:
    rng = random.Random(3)
    sample = GpuSample(index=2, uuid="GPU-2", timestamp_s=5.0, util_gpu_pct=rng.uniform(0, 100),
                       clock_event_reasons=["sw_power_cap"], processes=[GpuProcess(pid=7, gpu_mem_bytes=1 << 30)])
    info = GpuInfo(index=2, uuid="GPU-2", name="NVIDIA GeForce RTX 3090", brand="GeForce", pci_bus_id="0:1",
                   mem_total_bytes=24 << 30, power_limit_min_w=100.0, power_limit_max_w=350.0,
                   power_limit_default_w=350.0, pcie_gen_max_gpu=4, pcie_gen_max=4, pcie_width_max=16)
    process = ProcessSample(pid=7, name="python", user="me", cpu_pct=99.0, rss_bytes=1 << 30, command="python t.py")
    for record in (sample, info, process, GpuProcess(pid=1, gpu_mem_bytes=None)):
        row = plain(record)
        assert list(row) == [f.name for f in dataclasses.fields(record)]  # the fields' order too
        assert row == {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    sample.extra = "not a field"  # type: ignore[attr-defined]  # an attribute beyond the fields is no field
    assert "extra" not in plain(sample)


def test_the_host_row_is_asdict_with_its_own_lists() -> None:
    host = HostSample(cpu_pct=12.5, cpu_per_core_pct=[10.0, 15.0], mem_used_bytes=1, mem_total_bytes=2,
                      swap_used_bytes=0, swap_total_bytes=0, load_avg=[0.5, 0.4, 0.3], infiniband=True)
    row = host_row(host)
    assert row == dataclasses.asdict(host) and list(row) == list(dataclasses.asdict(host))
    row["cpu_per_core_pct"].append(99.0)
    row["load_avg"].clear()
    assert host.cpu_per_core_pct == [10.0, 15.0] and host.load_avg == [0.5, 0.4, 0.3]  # copies, as asdict's


def _old_num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


class _Float(float):
    pass


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -3.0, 1e308, math.nan, math.inf, -math.inf, 0, 7, True, False,
                                   None, "1.0", _Float(2.5), _Float(math.nan), 10**400])
def test_the_lessons_number_check_is_the_old_one(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**300:
        with pytest.raises(OverflowError):  # math.isfinite of a huge int: the old check raised too
            _old_num(value)
        with pytest.raises(OverflowError):
            _num(value)
        return
    got, expected = _num(value), _old_num(value)
    assert got == expected or (got is None and expected is None)
    assert type(got) is type(expected)


def test_the_ticks_learned_points_are_the_full_view_less_the_caps_in_force() -> None:
    """The hub's snapshot carries, per GPU, the learned figures at caps other than its cap now; the view
    now leaves the others out before their medians: the same rows as filtering the whole view."""
    from gpumix.hub.cap_samples import CapSamples
    from gpumix.power.budget import same_cap

    rng = random.Random(5)
    samples = CapSamples()
    for step in range(400):
        uuid = rng.choice(["GPU-a", "GPU-b", "GPU-c"])
        cap_w = rng.choice([200.0, 200.4, 250.0, 300.0, 320.0])
        samples.add(uuid, cap_w, rng.choice([16, 32]), rng.uniform(0.1, 0.2), rng.uniform(0.2, 0.3), float(step))
    for caps_w in ({"GPU-a": 200.0, "GPU-b": 300.0, "GPU-c": None}, {"GPU-a": 250.3}, {}):
        full = samples.view(500.0)
        expected = {}
        for uuid, rows in full.items():
            kept = [row for row in rows if caps_w.get(uuid) is None or not same_cap(row["cap_w"], caps_w[uuid])]
            if kept:
                expected[uuid] = kept
        assert samples.view(500.0, off_caps_w=caps_w) == expected
        assert expected != full or not caps_w  # the caps in force did leave rows out


def _plan_rank(r: int, samples: float, job: str = "train", connected: bool = True) -> dict[str, Any]:
    return {"rank": r, "world_size": 2, "job": job, "run_id": None, "connected": connected, "samples": samples,
            "micro_batch": 8.0, "accumulation_steps": samples / 8}


def _plan_snapshot(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    live = [r for r in ranks if r["connected"]]
    return {"ranks": ranks, "run": {"job": live[0]["job"], "run_id": None} if live else None, "jobs": {}}


def test_the_plans_split_is_made_again_whenever_a_figure_it_reads_changes() -> None:
    """The plan view keeps the last split while the ranks' figures stay the same; any change of a figure
    split_of reads (samples, world, connected, rank), or another job, is a new split, as without the cache."""
    from gpumix.hub.plan_in_force import PlansInForce, split_of

    plans = PlansInForce()
    sequence = [
        [_plan_rank(0, 64.0), _plan_rank(1, 32.0)],
        [_plan_rank(0, 64.0), _plan_rank(1, 32.0)],
        [_plan_rank(0, 48.0), _plan_rank(1, 48.0)],  # a re-plan: new samples
        [_plan_rank(0, 48.0), _plan_rank(1, 48.0, connected=False)],  # a rank restarting: no whole split
        [_plan_rank(0, 40.0), _plan_rank(1, 56.0)],
        [_plan_rank(0, 40.0, job="other"), _plan_rank(1, 56.0, job="other")],  # the same figures, another job
    ]
    for wall_s, ranks in enumerate(sequence):
        plan = plans.view(_plan_snapshot(ranks), float(wall_s))
        expected = split_of([r for r in ranks if r["job"] == plan["job"]])
        assert plan["ranks"] == (expected if expected is not None else plan["ranks"])
        assert plan["job"] == ranks[0]["job"]
    assert [share["samples"] for share in plan["ranks"]] == [40, 56]
    plan["ranks"][0]["samples"] = 999  # a caller changing its copy changes no later view
    assert plans.view(_plan_snapshot(sequence[-1]), 9.0)["ranks"][0]["samples"] == 40


def test_efficiencys_number_check_is_the_old_one() -> None:
    from gpumix.hub.efficiency import _positive

    def old(value: Any) -> float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        return float(value) if ok else None

    for value in (0.5, 0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, 3, 0, True, None, "2", _Float(1.5)):
        got, expected = _positive(value), old(value)
        assert (got == expected or (got is None and expected is None)) and type(got) is type(expected), value


def test_a_gpus_static_fields_follow_its_info_object() -> None:
    """The row's static part is kept per GpuInfo object: another info (a changed field) is its own row,
    the same info always the same fields, and the kept rows stay bounded."""
    from gpumix.hub import snapshot as snapshot_module

    def info(name: str) -> GpuInfo:
        return GpuInfo(index=0, uuid="GPU-0", name=name, brand="GeForce", pci_bus_id="0:1", mem_total_bytes=12 << 30,
                       power_limit_min_w=100.0, power_limit_max_w=170.0, power_limit_default_w=170.0,
                       pcie_gen_max_gpu=4, pcie_gen_max=4, pcie_width_max=16)

    sample = GpuSample(index=0, uuid="GPU-0", timestamp_s=1.0)
    first, second = info("NVIDIA GeForce RTX 3060"), info("NVIDIA GeForce RTX 4090")
    assert snapshot_module.gpu_row(first, sample, {})["name"] == "NVIDIA GeForce RTX 3060"
    assert snapshot_module.gpu_row(second, sample, {})["name"] == "NVIDIA GeForce RTX 4090"
    row = snapshot_module.gpu_row(first, sample, {})
    assert row["tier"] == first.tier and row == {**row, **dataclasses.asdict(first), "model": first.model,
                                                 **{k: v for k, v in dataclasses.asdict(sample).items() if k != "processes"}}
    row["name"] = "changed by a client"
    assert snapshot_module.gpu_row(first, sample, {})["name"] == "NVIDIA GeForce RTX 3060"  # each row its own
    for _ in range(snapshot_module._INFO_ROWS_KEPT + 5):
        snapshot_module.gpu_row(info("NVIDIA GeForce RTX 3090"), sample, {})
    assert len(snapshot_module._info_rows) <= snapshot_module._INFO_ROWS_KEPT
