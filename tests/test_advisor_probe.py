"""The advisor reads kept `gpumix probe` results (never runs the probe): a degraded slot, P2P copies that
come back wrong, a shared uplink, the measured all-reduce floor in the CPU-forwarding finding, and a
note when the kept result no longer describes the box. Each on a kept result crafted for it, on the
simulated mixed-10 rig (RTX 3060 gen4 x4 / x4 / x1, 3090s, 4090s; driver 570.153.02)."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpumix.advice.advisor import AdvisorSettings, Finding, findings
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.probe import store
from gpumix.probe.links import PROTOCOL_EFFICIENCY
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import ManualClock, ticked_hub
from tests.test_advisor import add_ranks
from tests.waiting import wait_until

HOUR_S = 3600.0
PROBE_IDS = {"probe-degraded-slot", "probe-p2p-wrong", "probe-copy-wrong", "probe-shared-uplink", "probe-stale"}


def kept_report(snapshot: dict[str, Any], age_s: float = 3 * HOUR_S, **parts: Any) -> dict[str, Any]:
    """A probe result as `gpumix probe` keeps it, for the box in this snapshot: every GPU healthy
    (90 % of what its link class carries), unless `parts` says otherwise."""
    machine = {"driver_version": snapshot["driver"]["driver_version"],
               "gpus": [{"nvml_index": g["index"], "uuid": g["uuid"], "name": g["name"],
                         "pcie_gen_max": g["pcie_gen_max"], "pcie_width_max": g["pcie_width_max"],
                         "link_max": f"{g['pcie_gen_max']}x{g['pcie_width_max']}"} for g in snapshot["gpus"]]}
    healthy = [{"gpu": g["index"], "link_now": f"{g['pcie_gen_max']}x{g['pcie_width_max']}",
                "best_h2d_bytes_per_s": 0.9 * PROTOCOL_EFFICIENCY * g["pcie_link_bytes_per_s_max"],
                "best_d2h_bytes_per_s": 0.88 * PROTOCOL_EFFICIENCY * g["pcie_link_bytes_per_s_max"]}
               for g in snapshot["gpus"]]
    return {"machine": machine, "measured_at": time.time() - age_s, "refused": [], "gpus": healthy,
            "together": None, "pairs": [], "allreduce": None, "findings": [], **parts}


def probe_found(snapshot: dict[str, Any], folder: Path, **settings: Any) -> list[Finding]:
    return [f for f in findings(snapshot, AdvisorSettings(probe_folder=folder, **settings)) if f.id in PROBE_IDS]


def only(found: list[Finding], finding_id: str) -> Finding:
    assert [f.id for f in found] == [finding_id], [(f.id, f.evidence) for f in found]
    return found[0]


def slow_gpu_0(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """GPU 0 (a 3060 on gen4 x4: 7.9 GB/s, 7.2 after protocol) copies at 1.6 GB/s: a gen2 x2 riser."""
    gpus = kept_report(snapshot)["gpus"]
    gpus[0] = {**gpus[0], "best_h2d_bytes_per_s": 1.6e9, "best_d2h_bytes_per_s": 1.5e9, "link_now": "2x2"}
    return gpus


def wrong_p2p_pair() -> list[dict[str, Any]]:
    right = {"correct": True, "differing_bytes": 0, "first_offset": None, "all_zeros": False}
    zeros = {"correct": False, "differing_bytes": 4 * 2**20, "first_offset": 0, "all_zeros": True}
    return [{"gpus": [7, 8], "p2p_access": {"7->8": True, "8->7": True},
             "directions": [{"from": 7, "to": 8, "route": "p2p", "checks": {"direct": zeros, "through_host": right}},
                            {"from": 8, "to": 7, "route": "p2p", "checks": {"direct": right, "through_host": right}}]}]


# -- each finding on its kept result, none on a healthy one ------------------------------------------------


def test_a_healthy_kept_result_gives_no_probe_finding(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    right = {"correct": True, "differing_bytes": 0, "all_zeros": False}
    pairs = [{"gpus": [7, 8], "directions": [{"from": 7, "to": 8, "route": "p2p",
                                              "checks": {"direct": right, "through_host": right}}]}]
    together = {"gpus": [6, 7, 8], "aggregate_bytes_per_s": 70e9, "sum_of_singles_bytes_per_s": 78e9}
    store.save(kept_report(snapshot, pairs=pairs, together=together), tmp_path)
    assert probe_found(snapshot, tmp_path) == []


def test_a_degraded_slot_from_the_measured_copies(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, gpus=slow_gpu_0(snapshot)), tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-degraded-slot")
    assert finding.severity == "warning" and finding.gpus == [0]
    assert "measured 1.6 GB/s host→device and 1.5 GB/s device→host (pinned, best)" in finding.evidence
    assert "PCIe gen4 x4 link that carries about 7.2 GB/s (22 %)" in finding.evidence
    assert "the copies ran at PCIe gen2 x2" in finding.evidence and "3 h ago" in finding.evidence
    assert "riser" in finding.fix and "BIOS" in finding.fix and "Reseat" in finding.fix


def test_a_slot_at_its_narrow_class_is_not_degraded(demo_hub: Hub, tmp_path: Path) -> None:
    # GPU 2's gen4 x1 riser moving 1.8 GB/s delivers what its class carries: narrow, not degraded
    snapshot = demo_hub.snapshot()
    gpus = kept_report(snapshot)["gpus"]
    gpus[2] = {**gpus[2], "best_h2d_bytes_per_s": 1.8e9, "best_d2h_bytes_per_s": 1.7e9}
    store.save(kept_report(snapshot, gpus=gpus), tmp_path)
    assert probe_found(snapshot, tmp_path) == []


def test_p2p_copies_that_come_back_wrong_are_an_error(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, pairs=wrong_p2p_pair()), tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-p2p-wrong")
    assert finding.severity == "error" and finding.gpus == [7, 8]
    assert "GPU 7 → GPU 8 came back as zeros" in finding.evidence and "GPU 8 → GPU 7" not in finding.evidence
    assert "driver 570.153.02" in finding.evidence
    assert "NCCL_P2P_DISABLE=1" in finding.fix and "Resizable BAR" in finding.fix and "IOMMU" in finding.fix


def test_copies_wrong_even_through_host_memory(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    pairs = wrong_p2p_pair()
    pairs[0]["directions"][1]["checks"]["through_host"] = {"correct": False, "differing_bytes": 12}
    store.save(kept_report(snapshot, pairs=pairs), tmp_path)
    found = {f.id: f for f in probe_found(snapshot, tmp_path)}
    assert sorted(found) == ["probe-copy-wrong", "probe-p2p-wrong"]
    assert "GPU 8 → GPU 7 wrong through host memory" in found["probe-copy-wrong"].evidence


def test_a_shared_uplink_from_all_at_once(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    together = {"gpus": [3, 4, 5], "size_bytes": 256 * 2**20, "aggregate_bytes_per_s": 14.5e9,
                "sum_of_singles_bytes_per_s": 39.0e9, "share_of_sum": 0.99}  # the file's own share is not trusted
    store.save(kept_report(snapshot, together=together), tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-shared-uplink")
    assert finding.severity == "warning" and finding.gpus == [3, 4, 5]
    assert "all at once moved 14.5 GB/s, 37 % of the 39.0 GB/s they move one at a time" in finding.evidence


# -- stale: one note saying which, nothing else ----------------------------------------------------------


def test_a_new_driver_makes_the_kept_result_stale(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    report = kept_report(snapshot, gpus=slow_gpu_0(snapshot), pairs=wrong_p2p_pair())
    report["machine"]["driver_version"] = "550.54.14"
    store.save(report, tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-stale")
    assert finding.severity == "info"
    assert "the driver was 550.54.14 then, 570.153.02 now" in finding.evidence
    assert "gpumix probe" in finding.fix


def test_a_moved_card_makes_the_kept_result_stale(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    report = kept_report(snapshot, gpus=slow_gpu_0(snapshot))
    report["machine"]["gpus"][0]["pcie_width_max"] = 16  # GPU 0 sat in an x16 slot when probed
    store.save(report, tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-stale")
    assert "GPU 0's link was gen4 x16 then, gen4 x4 now" in finding.evidence


def test_other_gpus_make_the_kept_result_stale(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    report = kept_report(snapshot, gpus=slow_gpu_0(snapshot))
    report["machine"]["gpus"] = report["machine"]["gpus"][:9]  # GPU 9 was not in the box then
    report["machine"]["gpus"][8]["uuid"] = "GPU-00000000-0000-0000-0000-000000000000"  # a card swapped out
    store.save(report, tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-stale")
    assert "the GPUs are not the ones probed (GPUs 8, 9 not probed; 1 probed GPU gone)" in finding.evidence


def test_an_old_result_is_stale_at_the_threshold(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, age_s=40 * 86400.0, gpus=slow_gpu_0(snapshot)), tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-stale")
    assert "it was measured 40 days ago, over the 30 days after which" in finding.evidence
    # the threshold is a setting: a year and the same result still speaks
    assert [f.id for f in probe_found(snapshot, tmp_path, probe_stale_after_s=365 * 86400.0)] == ["probe-degraded-slot"]


def test_the_matching_result_wins_over_a_newer_stale_one(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, age_s=5 * HOUR_S, gpus=slow_gpu_0(snapshot)), tmp_path)
    newer = kept_report(snapshot, age_s=HOUR_S)
    newer["machine"]["driver_version"] = "580.1"  # a driver tried an hour ago, then rolled back
    store.save(newer, tmp_path)
    assert only(probe_found(snapshot, tmp_path), "probe-degraded-slot").gpus == [0]


# -- the hub needs no change: the default settings read the state dir ---------------------------------------


def test_the_hub_reports_kept_results_from_the_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    clock = ManualClock()
    hub = ticked_hub(simulated_hardware(load_builtin_rig("mixed-10"), clock=clock), clock)
    assert not PROBE_IDS & {f["id"] for f in hub.snapshot()["findings"]}
    store.save(kept_report(hub.snapshot(), gpus=slow_gpu_0(hub.snapshot())))
    assert (tmp_path / "gpumix" / "probe").is_dir()
    hub.tick()  # the hub judges on its tick, as it does live
    assert "probe-degraded-slot" in {f["id"] for f in hub.snapshot()["findings"]}
    assert "probe-degraded-slot" not in {f.id for f in findings(hub.snapshot(), AdvisorSettings(probe_folder=None))}


# -- hostile files: ignored with one line, never markup ---------------------------------------------------------


def test_a_damaged_file_is_ignored_with_one_line(demo_hub: Hub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    snapshot = demo_hub.snapshot()
    (tmp_path / "probe-damaged.json").write_text('{"machine": {"gpus": [')
    store.save(kept_report(snapshot, gpus=slow_gpu_0(snapshot)), tmp_path)
    with caplog.at_level(logging.WARNING, logger="gpumix.probe.store"):
        for _ in range(3):  # the hub asks on every snapshot: the file is judged once
            assert [f.id for f in probe_found(snapshot, tmp_path)] == ["probe-degraded-slot"]
    lines = [r.getMessage() for r in caplog.records if "probe-damaged.json" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]


def test_hostile_figures_and_text_never_reach_a_finding(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    gpus = slow_gpu_0(snapshot)
    gpus[0]["link_now"] = "[bold red]2x2[/]\x1b[2J"
    gpus[1] = {**gpus[1], "best_h2d_bytes_per_s": float("nan"), "best_d2h_bytes_per_s": -5.0}
    gpus[3] = {**gpus[3], "best_h2d_bytes_per_s": 1e400, "best_d2h_bytes_per_s": True}
    gpus[4] = {**gpus[4], "best_h2d_bytes_per_s": "1e3", "best_d2h_bytes_per_s": None}
    pairs = wrong_p2p_pair()
    pairs[0]["directions"][0]["checks"]["direct"]["differing_bytes"] = "[link=http://x]many[/link]"
    pairs[0]["directions"].append({"from": 99, "to": "0", "checks": "zeros"})
    together = {"gpus": [3, "[b]", 4, 5], "aggregate_bytes_per_s": 1e9, "sum_of_singles_bytes_per_s": float("inf")}
    store.save(kept_report(snapshot, gpus=gpus, pairs=pairs, together=together), tmp_path)
    found = {f.id: f for f in probe_found(snapshot, tmp_path)}
    assert sorted(found) == ["probe-degraded-slot", "probe-p2p-wrong"]  # NaN, inf and strings are no figures
    text = " ".join(f.evidence + f.title for f in found.values())
    assert "[" not in text and "\x1b" not in text and "nan" not in text.lower()
    assert "the copies ran at" not in found["probe-degraded-slot"].evidence


def test_a_hostile_driver_version_is_not_echoed(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    report = kept_report(snapshot)
    report["machine"]["driver_version"] = "[blink]570[/blink]\x1b]8;;http://x\x07"
    store.save(report, tmp_path)
    finding = only(probe_found(snapshot, tmp_path), "probe-stale")
    assert "the driver was ? then, 570.153.02 now" in finding.evidence and "[" not in finding.evidence


def test_a_fifo_named_like_a_result_is_never_opened(demo_hub: Hub, tmp_path: Path) -> None:
    snapshot = demo_hub.snapshot()
    os.mkfifo(tmp_path / "probe-fifo.json")
    store.save(kept_report(snapshot, gpus=slow_gpu_0(snapshot)), tmp_path)
    answer: list[list[str]] = []
    reader = threading.Thread(target=lambda: answer.append([f.id for f in probe_found(snapshot, tmp_path)]), daemon=True)
    reader.start()
    assert wait_until(lambda: answer, timeout_s=10.0), "the advisor blocked opening a FIFO"
    assert answer == [["probe-degraded-slot"]]


def test_an_oversized_file_is_not_read(demo_hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = demo_hub.snapshot()
    path = store.save(kept_report(snapshot, gpus=slow_gpu_0(snapshot)), tmp_path)
    monkeypatch.setattr(store, "MAX_FILE_BYTES", path.stat().st_size - 1)
    assert probe_found(snapshot, tmp_path) == []


# -- the CPU-forwarding finding uses the measured all-reduce floor ----------------------------------------------


def floor_over(gpus: list[int], host_bus: float, p2p_bus: float | None = None) -> dict[str, Any]:
    runs = [{"p2p_disabled": True, "size_bytes": 256 * 2**20, "seconds_per_op": 0.1,
             "bus_bytes_per_s": host_bus, "transports": ["SHM/direct/direct"]}]
    if p2p_bus:
        runs.insert(0, {"p2p_disabled": False, "size_bytes": 256 * 2**20, "bus_bytes_per_s": p2p_bus,
                        "transports": ["P2P/CUMEM"]})
    return {"gpus": gpus, "size_bytes": 256 * 2**20, "runs": runs}


def cpu_forwarding(snapshot: dict[str, Any], folder: Path | None) -> list[Finding]:
    return [f for f in findings(snapshot, AdvisorSettings(probe_folder=folder)) if f.id == "cpu-forwarding"]


def test_cpu_forwarding_cites_the_measured_floor(demo_hub: Hub, tmp_path: Path) -> None:
    # 400 MB of gradients over 3 ranks in 300 ms exposed: 1.78 GB/s bus, 94 % of a 1.9 GB/s floor
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1, 2], 1.9e9, p2p_bus=None)), tmp_path)
    [finding] = cpu_forwarding(snapshot, tmp_path)
    assert ("`gpumix probe` measured the all-reduce floor through host memory over GPUs 0, 1, 2 at 1.9 GB/s bus"
            " (256 MiB, SHM/direct/direct, 3 h ago); this job's all-reduce runs at 94 % of it") in finding.evidence
    assert "paced by the link" not in finding.evidence and finding.gpus == [0, 1, 2]  # no link guessed


def test_a_floor_far_above_the_job_silences_the_link_prior(demo_hub: Hub, tmp_path: Path) -> None:
    # the link prior says GPU 2's x1 riser runs at 90 %; the probe measured 20 GB/s through the host over
    # these GPUs, of which the job uses 9 %: the path is not what holds it back
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    snapshot = demo_hub.snapshot()
    assert len(cpu_forwarding(snapshot, None)) == 1
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1, 2], 20e9)), tmp_path)
    assert cpu_forwarding(snapshot, tmp_path) == []


def test_a_floor_over_other_gpus_or_a_stale_one_leaves_the_prior(demo_hub: Hub, tmp_path: Path) -> None:
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1], 20e9)), tmp_path)
    [finding] = cpu_forwarding(snapshot, tmp_path)
    assert "gpumix probe` measured" not in finding.evidence and "paced by the link of GPU 2" in finding.evidence
    stale = kept_report(snapshot, age_s=60 * 86400.0, allreduce=floor_over([0, 1, 2], 20e9))
    store.save(stale, tmp_path / "old")
    [finding] = cpu_forwarding(snapshot, tmp_path / "old")
    assert "gpumix probe` measured" not in finding.evidence


def test_cpu_forwarding_names_the_measured_p2p_floor(demo_hub: Hub, tmp_path: Path) -> None:
    add_ranks(demo_hub, [0.20, 0.15, 0.12], gradient_bytes=4e8)
    snapshot = demo_hub.snapshot()
    store.save(kept_report(snapshot, allreduce=floor_over([0, 1, 2], 1.9e9, p2p_bus=5.5e9)), tmp_path)
    [finding] = cpu_forwarding(snapshot, tmp_path)
    assert finding.evidence.endswith("; with P2P it measured 5.5 GB/s bus")

