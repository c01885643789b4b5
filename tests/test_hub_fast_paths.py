"""The hub's cheaper paths (issue 13) give what the plain ones gave: parse_step's skip of absent
fields against the check of every field, and snapshot rows built without dataclasses.asdict."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest

from gpumix.hub.ranks import STEP_RANGES, parse_step
from gpumix.hub.snapshot import build_snapshot, gpu_row, plain
from gpumix.hw.hardware import Hardware
from gpumix.hw.host import ProcessSample
from gpumix.hw.types import GpuProcess, P2PLink
from gpumix.wire.protocol import ProtocolError, number
from gpumix.wire.snapshot_types import AMP_DTYPES

# what a field of a hostile or sloppy agent may hold: absent, null, in and out of range, mistyped
ODD_VALUES: list[Any] = [None, 0, 1, -1, 0.5, 1e12, -1e31, 1e31, True, False, "1", [], {}, 2**60, 1e-7,
                         float("nan"), float("inf"), -float("inf"), 2**1100, -(2**1100)]


def parse_step_checking_every_field(message: dict[str, Any]) -> dict[str, Any]:
    """parse_step as it was before the cut: number() for every declared field, present or not."""
    step = parse_step({"step": message["step"], "step_time_s": message["step_time_s"]})
    rejected = [name for name in step["rejected"] if name in ("step", "step_time_s")]
    for key, (low, high) in STEP_RANGES.items():
        value = number(message, key)
        if value is not None and not low <= value <= high:
            rejected.append(key)
            value = None
        step[key] = value
    dtype = message.get("amp_dtype")
    if dtype is not None and dtype not in AMP_DTYPES:
        rejected.append("amp_dtype")
        dtype = None
    step["amp_dtype"] = dtype
    step["rejected"] = rejected
    return step


def outcome(parse: Any, message: dict[str, Any]) -> Any:
    try:
        return parse(message)
    except ProtocolError as error:
        return ("refused", str(error))


def test_parse_step_matches_the_check_of_every_field_on_random_messages() -> None:
    rng = random.Random(13)
    names = list(STEP_RANGES)
    refused = kept = 0
    for _ in range(3000):
        message: dict[str, Any] = {"type": "step", "step": rng.choice([0, 7, -1, 2**54]),
                                   "step_time_s": rng.choice([0.1, 0.0, 1e6, 2])}
        for name in rng.sample(names, rng.randint(0, len(names))):
            message[name] = rng.choice(ODD_VALUES)
        if rng.random() < 0.3:
            message["amp_dtype"] = rng.choice([None, "bf16", "fp8", 3])
        new, old = outcome(parse_step, message), outcome(parse_step_checking_every_field, message)
        assert new == old, message
        assert repr(new) == repr(old), message  # the same types too: an int field read as a float
        refused += isinstance(new, tuple)
        kept += not isinstance(new, tuple)
    assert refused > 100 and kept > 100  # both outcomes were exercised


def test_the_step_ranges_are_finite() -> None:
    """parse_step's one-test path relies on it: with finite bounds a NaN or an inf is out of range."""
    assert all(math.isfinite(low) and math.isfinite(high) for low, high in STEP_RANGES.values())


def test_plain_is_asdict_for_every_record_a_snapshot_carries(demo_hardware: Hardware) -> None:
    backend = demo_hardware.backend
    records: list[Any] = [*backend.gpus(), backend.driver_info(), *backend.p2p(),
                          P2PLink(gpu_a=0, gpu_b=1, read="OK", write=None, topology="PHB", nvlinks=2),
                          GpuProcess(pid=42, gpu_mem_bytes=None),
                          ProcessSample(pid=42, name="python", user="u", cpu_pct=12.5, rss_bytes=1 << 30,
                                        command="python train.py [bold]")]
    for record in records:
        assert plain(record) == dataclasses.asdict(record), type(record).__name__
        # asdict's deep copy was only needed for nested values: these records hold none
        assert not any(isinstance(value, list | dict) or dataclasses.is_dataclass(value)
                       for value in plain(record).values()), type(record).__name__


def old_gpu_row_head(info: Any, sample: Any) -> dict[str, Any]:
    return {**dataclasses.asdict(info), "model": info.model, "tier": info.tier, **sample.to_json()}


@pytest.mark.parametrize("reasons", [None, [], ["sw_power_cap", "hw_slowdown"]])
def test_gpu_rows_match_the_asdict_rows_and_share_no_list(demo_hardware: Hardware,
                                                          reasons: list[str] | None) -> None:
    backend = demo_hardware.backend
    infos = backend.gpus()
    samples = [dataclasses.replace(sample, clock_event_reasons=None if reasons is None else list(reasons),
                                   processes=[GpuProcess(pid=7, gpu_mem_bytes=1 << 20), GpuProcess(pid=8, gpu_mem_bytes=None)])
               for sample in backend.sample()]
    processes = {7: ProcessSample(pid=7, name="python", user="u", cpu_pct=99.0, rss_bytes=1, command="train")}
    for info, sample in zip(infos, samples, strict=True):
        row = gpu_row(info, sample, processes)
        old = old_gpu_row_head(info, sample)
        for key, value in old.items():
            if key != "processes":
                assert row[key] == value, key
        assert [p["pid"] for p in row["processes"]] == [7, 8]
        assert row["processes"][0]["name"] == "python" and row["processes"][1]["name"] is None
        if reasons is not None:  # the row's list is its own: a client changing it leaves the sample alone
            row["clock_event_reasons"].append("changed")
            assert sample.clock_event_reasons == reasons
    snapshot = build_snapshot(timestamp_s=1.0, source="sim", driver=backend.driver_info(), infos=infos,
                              samples=samples, host=None, processes=processes, p2p=backend.p2p(), hostname="h")
    assert snapshot["driver"] == dataclasses.asdict(backend.driver_info())
    assert snapshot["p2p"] == [dataclasses.asdict(link) for link in backend.p2p()]
