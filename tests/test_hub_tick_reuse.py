"""What the hub's tick now makes once or reuses (issue 13) gives the snapshot the old path gave, tick
after tick while its inputs change: the GPU-to-GPU link rows (made once per topology), the tier table
(made once per merge, the advisor reading the merge's) and the findings' JSON (without asdict)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

from gpumix.advice.advisor import Finding, findings
from gpumix.hub import Hub
from gpumix.hub.merge import SETTINGS_ENV, advisor_settings
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.hub.snapshot import gpu_row
from gpumix.hw.hardware import Hardware
from gpumix.power.tiers import tier_table
from tests.conftest import ManualClock, ticked_hub

SPEEDS = [0.40, 0.40, 0.41, 0.19, 0.19, 0.19, 0.18, 0.12, 0.12, 0.12]  # the 3060s straggle


def old_path(hub: Hub, snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot as the old path made it from the same merge: link rows through asdict at each
    tick, the advisor making its own tier table, each finding through asdict."""
    plain = {key: value for key, value in snapshot.items() if key not in ("findings", "tiers")}
    settings = advisor_settings(hub.hardware.power_budget_w, bool((snapshot.get("host") or {}).get("infiniband")),
                                *(os.environ.get(name) for name in SETTINGS_ENV))
    return {**snapshot, "p2p": [dataclasses.asdict(link) for link in hub.hardware.backend.p2p()],
            "tiers": tier_table(plain),
            "findings": [finding_fields(finding) for finding in findings(plain, settings)]}


def finding_fields(finding: Finding) -> dict[str, Any]:
    """A finding's fields by name, deep-copied, as dataclasses.asdict gave them while Finding was a dataclass."""
    return {name: copy.deepcopy(getattr(finding, name)) for name in ("id", "severity", "title", "evidence", "fix", "gpus")}


def add_ranks(hub: Hub) -> list[Any]:
    gpus = hub.snapshot()["gpus"]
    keys = []
    for rank, compute_s in enumerate(SPEEDS):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(SPEEDS), "job": "train", "pid": 7000 + rank,
                                           "gpu_uuid": gpus[rank]["uuid"],
                                           "env": {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}}))
        for step in range(5):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": 32,
                                            "comm_s": 0.5 - compute_s, "data_wait_s": 0.0}))
        keys.append(key)
    return keys


def test_snapshots_match_the_old_path_while_findings_caps_and_ranks_change(demo_hardware: Hardware,
                                                                         clock: ManualClock) -> None:
    hub = ticked_hub(demo_hardware, clock)
    seen: list[dict[str, str]] = []  # each check's findings: id -> evidence

    def check() -> None:
        snapshot = hub.snapshot()
        assert snapshot is not None
        assert json.dumps(snapshot, sort_keys=True) == json.dumps(old_path(hub, snapshot), sort_keys=True)
        seen.append({finding["id"]: finding["evidence"] for finding in snapshot["findings"]})

    def tick() -> None:
        # a client changing what it was given (a link row, a finding's GPUs) leaves the next tick's alone
        given = hub.snapshot()
        given["p2p"][0]["read"] = "changed by a client"
        for finding in given["findings"]:
            finding["gpus"].append(99)
        hub.tick()
        clock.advance(1.0)
        check()

    tick()
    keys = add_ranks(hub)  # the 3060 tier straggles: a tier finding appears between ticks
    check()
    tick()
    for index in (7, 8, 9):  # the 4090s raised to 600 W: the caps over the budget add up to more
        assert hub.control({"type": "power", "action": "set", "gpus": [index], "watts": 600.0})["ok"]
    check()
    tick()
    for key in keys:  # the job's ranks forgotten (a gone rank's env is dropped after the advisor): its tier finding goes
        hub.forget_rank(key)
    check()
    tick()
    for index in (7, 8, 9):  # back to the stock caps
        assert hub.control({"type": "power", "action": "reset", "gpus": [index]})["ok"]
    tick()
    tick()
    assert "tier-straggler" in seen[1] and "tier-straggler" not in seen[0] and "tier-straggler" not in seen[5]
    caps = [found["caps-over-budget"].split(" W")[0] for found in seen]
    assert caps[2] != caps[3] == caps[4] != caps[-1] == caps[0], caps


def test_finding_json_is_its_fields_and_its_own() -> None:
    for finding in (Finding("a", "info", "t", "e [bold]", "f"), Finding("b", "error", "t", "e", "f", [3, 1])):
        assert finding.to_json() == finding_fields(finding)
        assert list(finding.to_json()) == list(finding_fields(finding))  # the same key order
        finding.to_json()["gpus"].append(5)
        assert 5 not in finding.gpus
    given = [3, 1]
    kept = Finding("b", "error", "t", "e", "f", given)
    given.append(7)  # the caller's list is not the finding's
    assert kept.gpus == [3, 1] and kept == Finding("b", "error", "t", "e", "f", (3, 1))
    assert kept != Finding("b", "error", "t", "e", "f", [1, 3]) and kept != kept.to_json()
    assert repr(kept) == "Finding(id='b', severity='error', title='t', evidence='e', fix='f', gpus=[3, 1])"


def test_gpu_rows_follow_a_changed_gpu_info(demo_hardware: Hardware) -> None:
    """The static facts are made once per GpuInfo: another info (another card's memory, name) is
    another row, never the first one's."""
    info, sample = demo_hardware.backend.gpus()[0], demo_hardware.backend.sample()[0]
    first = gpu_row(info, sample, {})
    other = dataclasses.replace(info, name="NVIDIA GeForce RTX 9999", mem_total_bytes=(info.mem_total_bytes or 0) * 2)
    row = gpu_row(other, sample, {})
    assert (row["name"], row["model"], row["tier"]) == (other.name, other.model, other.tier) != (
        first["name"], first["model"], first["tier"])
    static = {key: value for key, value in dataclasses.asdict(other).items() if key not in dataclasses.asdict(sample)}
    assert {key: row[key] for key in static} == static  # the sample's readings (its memory total) come after
    row["name"] = "changed by a client"
    assert gpu_row(other, sample, {})["name"] == other.name
