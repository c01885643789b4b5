"""The advisor: each finding on a rig or snapshot built for it, none on a healthy box, and `gpumix doctor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumix.advice.advisor import (
    DEFAULT_4090_P2P_MIN_DRIVER,
    AdvisorSettings,
    Finding,
    exit_code,
    findings,
)
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.power.tiers import OPTIONS_STRAGGLER, OPTIONS_UNDERUSED, tier_table
from gpumix.sim.machine import GpuActivity
from gpumix.sim.rig import load_rig
from tests.conftest import ManualClock, ticked_hub

RIGS = Path(__file__).parent / "rigs"
TOOL = [sys.executable, "-m", "gpumix.cli.main"]
GOOD_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}


def rig_hub(path: Path | str, clock: ManualClock | None = None) -> Hub:
    clock = clock or ManualClock()
    return ticked_hub(simulated_hardware(load_rig(path), clock=clock), clock)


def write_rig(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rig.toml"
    path.write_text(text)
    return path


def add_ranks(hub: Hub, computes: list[float], step_s: float = 0.5, env: dict[str, str] | list[dict[str, str]] | None = None,
              job: str = "train", gradient_bytes: float | None = None) -> list[Any]:
    """One rank per GPU (rank i on GPU i), each reporting a few steps of this compute time; their keys."""
    gpus = hub.snapshot()["gpus"]
    keys = []
    for rank, compute in enumerate(computes):
        rank_env = env[rank] if isinstance(env, list) else (env if env is not None else dict(GOOD_ENV))
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(computes), "job": job,
                                          "gpu_uuid": gpus[rank]["uuid"], "env": rank_env}))
        for step in range(5):
            hub.agent_step(key, parse_step({"step": step, "step_time_s": step_s, "samples": 32,
                                            "comm_s": step_s - compute, "data_wait_s": 0.0,
                                            **({"gradient_bytes": gradient_bytes} if gradient_bytes else {})}))
        keys.append(key)
    return keys


def ids(snapshot: dict[str, Any], settings: AdvisorSettings | None = None) -> list[str]:
    return [f.id for f in findings(snapshot, settings)]


def one(snapshot: dict[str, Any], finding_id: str, settings: AdvisorSettings | None = None) -> Finding:
    found = [f for f in findings(snapshot, settings) if f.id == finding_id]
    assert len(found) == 1, [f.id for f in findings(snapshot, settings)]
    return found[0]


DEMO_SPEEDS = [0.40, 0.40, 0.41, 0.19, 0.19, 0.19, 0.18, 0.12, 0.12, 0.12]  # 3060s straggle, 4090s wait


# -- a healthy box -----------------------------------------------------------------------------


def test_healthy_rig_has_no_findings() -> None:
    hub = rig_hub(RIGS / "healthy.toml")
    snapshot = hub.snapshot()
    assert snapshot["findings"] == []
    assert findings(snapshot) == [] and exit_code([]) == 0
    assert findings(snapshot, AdvisorSettings(power_budget_w=1500)) == []


def test_every_finding_has_a_known_severity_and_a_fix(demo_hub: Hub) -> None:
    add_ranks(demo_hub, DEMO_SPEEDS, env={"NCCL_SHM_DISABLE": "1"})
    found = findings(demo_hub.snapshot())
    assert len(found) >= 8
    for finding in found:
        assert finding.severity in ("info", "warning", "error") and finding.title and finding.evidence and finding.fix
        assert set(finding.to_json()) == {"id", "severity", "title", "evidence", "fix", "gpus"}
    ranks = [{"info": 0, "warning": 1, "error": 2}[f.severity] for f in found]
    assert ranks == sorted(ranks, reverse=True)  # errors first


# -- P2P --------------------------------------------------------------------------------------


def test_p2p_unavailable_is_info_without_ranks(demo_hub: Hub) -> None:
    finding = one(demo_hub.snapshot(), "p2p-unavailable")
    assert finding.severity == "info" and finding.title == "P2P between GPUs is unavailable"
    assert finding.evidence == "45 of 45 GPU pairs refuse P2P (GPU not supported)"
    assert "NCCL_P2P_DISABLE=1" in finding.fix and "NCCL_SHM_DISABLE" in finding.fix


def test_p2p_unavailable_is_a_warning_when_ranks_lack_p2p_disable(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2, 0.2, 0.2], env=[GOOD_ENV, {"NCCL_IB_DISABLE": "1"}, {"NCCL_P2P_DISABLE": "0", "NCCL_IB_DISABLE": "1"}])
    finding = one(demo_hub.snapshot(), "p2p-unavailable")
    assert finding.severity == "warning"
    assert "2 rank(s) run without NCCL_P2P_DISABLE=1" in finding.evidence


def test_p2p_unavailable_stays_info_when_every_rank_sets_p2p_disable(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2, 0.2, 0.2])
    assert one(demo_hub.snapshot(), "p2p-unavailable").severity == "info"


def test_no_p2p_finding_when_pairs_allow_p2p() -> None:
    assert "p2p-unavailable" not in ids(rig_hub(RIGS / "healthy.toml").snapshot())


def test_shm_disabled_with_p2p_unavailable_is_an_error(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2, 0.2, 0.2], env=[GOOD_ENV, {**GOOD_ENV, "NCCL_SHM_DISABLE": "1"}, GOOD_ENV])
    finding = one(demo_hub.snapshot(), "shm-disabled")
    assert finding.severity == "error" and "ranks 1 set NCCL_SHM_DISABLE=1" in finding.evidence
    assert exit_code(findings(demo_hub.snapshot())) == 2


def test_shm_disabled_is_fine_where_p2p_works() -> None:
    hub = rig_hub(RIGS / "healthy.toml")
    add_ranks(hub, [0.2, 0.2], env={**GOOD_ENV, "NCCL_SHM_DISABLE": "1"})
    assert "shm-disabled" not in ids(hub.snapshot())


def test_4090_p2p_on_an_old_driver() -> None:
    snapshot = rig_hub(RIGS / "old_driver_4090.toml").snapshot()
    finding = one(snapshot, "4090-p2p-old-driver")
    assert finding.severity == "error" and finding.gpus == [0, 1]
    assert "520.61.05" in finding.evidence and DEFAULT_4090_P2P_MIN_DRIVER in finding.evidence
    assert "pairs: 0-1" in finding.evidence and "NCCL_P2P_DISABLE=1" in finding.fix
    assert exit_code(findings(snapshot)) == 2


def test_4090_p2p_on_a_newer_driver_is_fine(tmp_path: Path) -> None:
    text = (RIGS / "old_driver_4090.toml").read_text().replace('"520.61.05"', '"550.54.14"')
    snapshot = rig_hub(write_rig(tmp_path, text)).snapshot()
    assert "4090-p2p-old-driver" not in ids(snapshot)
    assert findings(snapshot) == []


def test_4090_threshold_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = rig_hub(RIGS / "old_driver_4090.toml").snapshot()
    assert "4090-p2p-old-driver" not in ids(snapshot, AdvisorSettings(p2p_4090_min_driver="520.61.05"))
    assert "4090-p2p-old-driver" not in ids(snapshot, AdvisorSettings(p2p_4090_min_driver="515"))
    assert "4090-p2p-old-driver" in ids(snapshot, AdvisorSettings(p2p_4090_min_driver="520.61.06"))
    monkeypatch.setenv("GPUMIX_4090_P2P_MIN_DRIVER", "500.1")
    assert AdvisorSettings().p2p_4090_min_driver == "500.1"
    assert "4090-p2p-old-driver" not in ids(snapshot)
    monkeypatch.setenv("GPUMIX_4090_P2P_MIN_DRIVER", "600")
    assert "drivers before 600" in one(snapshot, "4090-p2p-old-driver").evidence
    monkeypatch.setenv("GPUMIX_4090_P2P_MIN_DRIVER", "")  # empty: the default
    assert AdvisorSettings().p2p_4090_min_driver == DEFAULT_4090_P2P_MIN_DRIVER


def test_old_driver_without_4090s_is_fine(tmp_path: Path) -> None:
    text = (RIGS / "old_driver_4090.toml").read_text().replace('"rtx4090"', '"rtx3090"')
    assert findings(rig_hub(write_rig(tmp_path, text)).snapshot()) == []


# -- NCCL environment -------------------------------------------------------------------------------


def test_ib_disable_unset_without_infiniband(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2, 0.2], env={"NCCL_P2P_DISABLE": "1"})
    snapshot = demo_hub.snapshot()
    finding = one(snapshot, "ib-disable-unset")
    assert finding.severity == "info" and "NCCL_IB_DISABLE=1" in finding.fix
    assert "ib-disable-unset" in [f["id"] for f in snapshot["findings"]]  # the hub's own findings too
    assert "ib-disable-unset" not in ids(snapshot, AdvisorSettings(has_infiniband=True))
    with_ib = {**snapshot, "host": {**snapshot["host"], "infiniband": True}}
    assert "ib-disable-unset" not in ids(with_ib)  # the default settings read the host's InfiniBand


def test_ib_disable_set_or_no_ranks_is_quiet(demo_hub: Hub) -> None:
    assert "ib-disable-unset" not in ids(demo_hub.snapshot())
    add_ranks(demo_hub, [0.2, 0.2])
    assert "ib-disable-unset" not in ids(demo_hub.snapshot())


def test_ranks_disagreeing_on_nccl_settings(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2, 0.2, 0.2], env=[GOOD_ENV, GOOD_ENV, {**GOOD_ENV, "NCCL_ALGO": "Ring"}])
    finding = one(demo_hub.snapshot(), "nccl-env-disagree")
    assert finding.severity == "warning"
    assert "job train" in finding.evidence and "NCCL_ALGO" in finding.evidence
    assert "rank 2=Ring" in finding.evidence and "rank 0=unset" in finding.evidence


def test_different_jobs_may_differ(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.2], env=GOOD_ENV, job="a")
    key = demo_hub.agent_hello(parse_hello({"rank": 0, "job": "b", "gpu_uuid": demo_hub.snapshot()["gpus"][5]["uuid"],
                                            "env": {**GOOD_ENV, "NCCL_ALGO": "Tree"}}))
    demo_hub.agent_step(key, parse_step({"step": 0, "step_time_s": 0.5}))
    assert "nccl-env-disagree" not in ids(demo_hub.snapshot())


# -- links and slots ----------------------------------------------------------------------------


def test_lost_gpu(demo_hardware, clock) -> None:
    demo_hardware.machine.lost.add(4)
    snapshot = ticked_hub(demo_hardware, clock).snapshot()
    finding = one(snapshot, "gpu-lost")
    assert finding.severity == "error" and finding.gpus == [4] and "Xid 79" in finding.fix
    assert exit_code(findings(snapshot)) == 2


def test_link_below_max_under_load(demo_hardware, clock) -> None:
    machine = demo_hardware.machine
    machine.synthetic_job = False  # the test drives the GPUs: GPU 7 busy, the others idle
    original = machine.link_gen_current
    machine.link_gen_current = lambda index: 3 if index == 7 else original(index)  # type: ignore[method-assign]
    machine.set_activity(7, GpuActivity(busy_fraction=0.9, util_pct=90))
    snapshot = ticked_hub(demo_hardware, clock).snapshot()
    finding = one(snapshot, "link-below-max")
    assert finding.gpus == [7] and finding.severity == "warning"
    assert "gen3 x16 while busy" in finding.evidence and "gen4 x16" in finding.evidence


def test_link_at_max_is_fine(demo_hub: Hub) -> None:
    assert "link-below-max" not in ids(demo_hub.snapshot())


def test_narrow_links(demo_hub: Hub) -> None:
    narrow = [f for f in findings(demo_hub.snapshot()) if f.id == "narrow-link"]
    assert [f.gpus for f in narrow] == [[0], [1], [2]]
    assert "x1" in narrow[2].title and "gen4 x1" in narrow[2].evidence and "2.0 GB/s" in narrow[2].evidence


def test_chipset_gpus_are_off_the_main_root(demo_hub: Hub) -> None:
    finding = one(demo_hub.snapshot(), "off-main-root")
    assert finding.gpus == [0, 1, 2] and finding.severity == "warning"
    assert "GPUs 0, 1, 2" in finding.title and "3, 4, 5, 6, 7, 8, 9" in finding.evidence


def test_all_on_cpu_lanes_is_one_root(tmp_path: Path) -> None:
    rig = 'name = "flat"\n' + '[[gpus]]\nmodel = "rtx3090"\nslot_width = 16\n' * 4
    assert "off-main-root" not in ids(rig_hub(write_rig(tmp_path, rig)).snapshot())


# -- power ------------------------------------------------------------------------------------------


def test_caps_over_budget(demo_hub: Hub) -> None:
    finding = one(demo_hub.snapshot(), "caps-over-budget")
    assert "caps 3300 W" in finding.evidence and "2800 W budget" in finding.evidence
    assert "gpumix power fit --budget 2800" in finding.fix
    assert "caps-over-budget" not in ids(demo_hub.snapshot(), AdvisorSettings(power_budget_w=3300))
    assert "caps-over-budget" in ids(rig_hub(RIGS / "healthy.toml").snapshot(), AdvisorSettings(power_budget_w=600))


def test_caps_within_budget_after_a_fit(demo_hub: Hub) -> None:
    assert demo_hub.control({"type": "power", "action": "fit"})["ok"]
    assert "caps-over-budget" not in ids(demo_hub.snapshot())


# -- the all-reduce through the CPU ---------------------------------------------------------------------


def test_cpu_forwarding_from_exposed_communication_and_a_link_at_its_limit(demo_hub: Hub) -> None:
    # 100 M fp32 parameters, 3 ranks: 2(R-1)/R x 400 MB cross each link in the 300 ms the slowest rank
    # waits: GPU 2's gen4 x1 riser (1.97 GB/s) runs at 90 % while the all-reduce runs.
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    finding = one(demo_hub.snapshot(), "cpu-forwarding")
    assert finding.severity == "error"  # 60 % of the step
    assert "exposed communication 300 ms of a 500 ms step (60 %, rank 0" in finding.evidence
    assert "NCCL_P2P_DISABLE=1" in finding.evidence
    assert "link shares while communicating: GPU 2 90 %" in finding.evidence
    assert "paced by the link of GPU 2 (RTX 3060 12G, gen4 x1)" in finding.evidence
    assert finding.gpus == [2]
    assert "bucket_cap_mb" in finding.fix


def test_host_cpu_load_alone_never_makes_cpu_forwarding(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.45, 0.44, 0.40], gradient_bytes=4e8)  # the all-reduce is 10 % of the step
    snapshot = demo_hub.snapshot()
    busy = {**snapshot, "host": {**snapshot["host"], "cpu_pct": 100.0}}
    assert "cpu-forwarding" not in ids(busy)


def test_a_costly_allreduce_on_quiet_links_is_not_cpu_forwarding(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.20, 0.15, 0.12])  # 60 % waiting, but no link near its limit: not the links
    snapshot = demo_hub.snapshot()
    # averaged over the tick below 70 % of the 60 % spent communicating: no link near its limit
    assert max(max(g["pcie_rx_link_share"], g["pcie_tx_link_share"]) for g in snapshot["gpus"][:3]) < 0.7 * 0.6
    busy = {**snapshot, "host": {**snapshot["host"], "cpu_pct": 100.0}}
    assert "cpu-forwarding" not in ids(busy)


def test_cpu_forwarding_when_host_memory_is_at_its_limit(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.20, 0.15, 0.12])
    snapshot = demo_hub.snapshot()
    full = {**snapshot, "host": {**snapshot["host"], "memory_bandwidth_share": 0.92}}
    assert "host memory at 92 % of its bandwidth" in one(full, "cpu-forwarding").evidence


def test_cpu_forwarding_seen_through_the_shm_transport(demo_hub: Hub) -> None:
    keys = add_ranks(demo_hub, [0.20, 0.15], env={"NCCL_IB_DISABLE": "1"}, gradient_bytes=2e9)
    demo_hub.agent_transport(keys[0], [{"src": 0, "dst": 1, "transport": "SHM/direct"}])
    assert "NCCL's SHM transport" in one(demo_hub.snapshot(), "cpu-forwarding").evidence


def test_no_cpu_forwarding_when_the_allreduce_is_cheap_and_links_quiet(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.45, 0.44, 0.40])  # the slowest rank's comm share is 10 %
    snapshot = demo_hub.snapshot()
    assert max(max(g["pcie_rx_link_share"], g["pcie_tx_link_share"]) for g in snapshot["gpus"]) < 0.7
    assert "cpu-forwarding" not in ids(snapshot)


def test_no_cpu_forwarding_where_p2p_works() -> None:
    hub = rig_hub(RIGS / "healthy.toml")
    add_ranks(hub, [0.2, 0.2], env={"NCCL_IB_DISABLE": "1"})  # P2P on, the all-reduce does not cross the host
    assert "cpu-forwarding" not in ids(hub.snapshot())


def test_cpu_forwarding_through_a_busy_link(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.30, 0.28])  # the all-reduce is 40 % of the step
    snapshot = demo_hub.snapshot()
    gpus = [dict(g) for g in snapshot["gpus"]]
    gpus[1]["pcie_rx_link_share"] = 0.34  # NVML's average over the tick: 85 % during the 40 % communicating
    finding = one({**snapshot, "gpus": gpus}, "cpu-forwarding")
    assert finding.severity == "warning"
    assert "link shares while communicating: GPU 1 85 %, GPU 0 " in finding.evidence
    assert finding.evidence.endswith("paced by the link of GPU 1 (RTX 3060 12G, gen4 x4)") and finding.gpus == [1]


def test_a_busy_link_with_a_cheap_allreduce_is_not_cpu_forwarding(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.45, 0.44])
    snapshot = demo_hub.snapshot()
    gpus = [dict(g) for g in snapshot["gpus"]]
    gpus[1]["pcie_rx_link_share"] = 0.85
    assert "cpu-forwarding" not in ids({**snapshot, "gpus": gpus})


# -- tiers ------------------------------------------------------------------------------------------


def test_tier_straggler_and_underutilized(demo_hub: Hub) -> None:
    add_ranks(demo_hub, DEMO_SPEEDS)
    snapshot = demo_hub.snapshot()
    table = {tier["tier"]: tier for tier in tier_table(snapshot)}
    slow, fast = table["RTX 3060 12G"], table["RTX 4090 24G"]
    assert slow["flag"] == "straggler" and slow["options"] == OPTIONS_STRAGGLER
    assert "ranks 0, 1, 2 compute 0.400 s per step" in slow["evidence"]
    assert fast["flag"] == "underutilized" and fast["options"] == OPTIONS_UNDERUSED
    assert fast["wait_share"] == pytest.approx((0.41 - 0.12) / 0.5)
    assert "its ranks wait 58 % of every step" in fast["evidence"]
    assert slow["gpus"] == [0, 1, 2] and slow["ranks"] == [0, 1, 2] and slow["count"] == 3
    assert slow["samples_per_s"] == pytest.approx(3 * 32 / 0.5)
    straggler = one(snapshot, "tier-straggler")
    assert straggler.title == "RTX 3060 12G tier is the straggler" and straggler.gpus == [0, 1, 2]
    assert "gpumix plan" in straggler.fix and "out of the training job" in straggler.fix
    underused = [f for f in findings(snapshot) if f.id == "tier-underutilized"]
    assert "RTX 4090 24G tier is underutilized" in [f.title for f in underused]
    assert any("gpumix power fit" in f.fix for f in underused)


def test_balanced_tiers_are_not_flagged(demo_hub: Hub) -> None:
    add_ranks(demo_hub, [0.40] * 10)
    assert all(tier["flag"] is None and tier["options"] == [] for tier in tier_table(demo_hub.snapshot()))
    assert not {"tier-straggler", "tier-underutilized"} & set(ids(demo_hub.snapshot()))


def test_tiers_without_ranks(demo_hub: Hub) -> None:
    table = tier_table(demo_hub.snapshot())
    assert [t["tier"] for t in table] == ["RTX 3060 12G", "RTX 3090 24G", "RTX 4090 24G"]
    assert [t["count"] for t in table] == [3, 4, 3]
    assert all(t["flag"] is None and t["wait_share"] is None and t["samples_per_s"] is None for t in table)


# -- exit codes and `gpumix doctor` --------------------------------------------------------------------


def test_exit_code_is_the_worst_severity() -> None:
    def finding(severity: str) -> Finding:
        return Finding("x", severity, "t", "e", "f")

    assert exit_code([]) == 0
    assert exit_code([finding("info")]) == 0
    assert exit_code([finding("info"), finding("warning")]) == 1
    assert exit_code([finding("warning"), finding("error"), finding("info")]) == 2


def doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, "doctor", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_doctor_healthy_rig_exits_0() -> None:
    result = doctor("--sim", str(RIGS / "healthy.toml"))
    assert result.returncode == 0, result.stderr
    assert "healthy: no findings" in result.stdout


def test_doctor_old_driver_exits_2_and_json_shape() -> None:
    result = doctor("--sim", str(RIGS / "old_driver_4090.toml"), "--json")
    assert result.returncode == 2, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"exit_code", "findings"} and data["exit_code"] == 2
    assert [f["id"] for f in data["findings"]] == ["4090-p2p-old-driver"]
    assert set(data["findings"][0]) == {"id", "severity", "title", "evidence", "fix", "gpus"}
    relaxed = doctor("--sim", str(RIGS / "old_driver_4090.toml"), "--min-4090-p2p-driver", "510")
    assert relaxed.returncode == 0, relaxed.stdout
    from_env = doctor("--sim", str(RIGS / "old_driver_4090.toml"), GPUMIX_4090_P2P_MIN_DRIVER="510")
    assert from_env.returncode == 0, from_env.stdout


def test_doctor_text_and_power_budget_flag() -> None:
    result = doctor("--sim", str(RIGS / "healthy.toml"), "--power-budget", "500")
    assert result.returncode == 1
    assert "[warning] Power caps add up to more than the budget" in result.stdout
    assert "evidence: caps 700 W" in result.stdout and "fix:" in result.stdout


def test_doctor_demo_reports_warnings() -> None:
    result = doctor("--demo", "--json")
    assert result.returncode >= 1, result.stderr
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.returncode
    found = {f["id"] for f in data["findings"]}
    assert {"p2p-unavailable", "narrow-link", "off-main-root", "caps-over-budget", "tier-straggler"} <= found
