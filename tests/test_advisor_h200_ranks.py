"""The advisor on snapshots that real ranks produced: a DDP job (examples/ddp_train.py, 512 MiB of
gradients) on two H200s under a hub, with NCCL_P2P_DISABLE=1 (SHM) and without (NVLink), recorded by
benchmarks/cpu_forwarding_run.py on 2026-12-01 (docs/benchmarks.md, issue 17)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from gpumix.advice.advisor import findings

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def recorded(label: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"forwarding_2xh200_{label}_2026-12-01.json").read_text())["snapshot"]


def ids(snapshot: dict[str, Any]) -> list[str]:
    return [f.id for f in findings(snapshot)]


def on_narrow_links(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The same ranks as measured, their GPUs on gen3 x4 links (a riser): the ring's traffic during the
    exposed communication is then far above what such a link carries."""
    narrow = copy.deepcopy(snapshot)
    for gpu in narrow["gpus"]:
        gpu.update(pcie_gen_max=3, pcie_width_max=4, pcie_link_bytes_per_s_max=3.94e9,
                   pcie_link_bytes_per_s_current=3.94e9)
    return narrow


def test_ranks_whose_step_is_all_exposed_communication_are_evidence() -> None:
    snapshot = on_narrow_links(recorded("shm"))
    # as the H200 ranks reported it: communication (with data wait) filled the step, compute_s is 0
    assert [r["compute_s"] for r in snapshot["ranks"]] == [0.0, 0.0]
    found = [f for f in findings(snapshot) if f.id == "cpu-forwarding"]
    assert len(found) == 1
    assert "NCCL's SHM transport" in found[0].evidence and "(77 %, rank 0" in found[0].evidence
    assert found[0].severity == "error" and found[0].gpus == [0, 1]


def test_p2p_that_works_turned_off_is_the_bottleneck_and_on_is_quiet() -> None:
    # as measured: NVLink (NVML reads P2P OK), NCCL_P2P_DISABLE=1, SHM's all-reduce 77 % of the step,
    # and no link near its limit (62-63 % while communicating): the host path is a setting
    found = [f for f in findings(recorded("shm")) if f.id == "cpu-forwarding"]
    assert len(found) == 1 and found[0].gpus == [0, 1] and found[0].severity == "error"
    assert "(77 %, rank 0" in found[0].evidence and "yet P2P reads OK between GPUs 0, 1" in found[0].evidence
    assert "paced by" not in found[0].evidence  # no link is at its limit: it would name the wrong cause
    assert found[0].fix.startswith("Let NCCL use P2P: unset NCCL_P2P_DISABLE")
    assert "cpu-forwarding" not in ids(recorded("nvlink"))  # the same job with P2P on


def test_a_per_rank_nccl_debug_file_is_no_disagreement() -> None:
    for label in ("shm", "nvlink"):
        snapshot = recorded(label)
        files = {r["env"].get("NCCL_DEBUG_FILE") for r in snapshot["ranks"]}
        assert len(files) == 2  # the agent's transport probe gives each rank its own log
        assert "nccl-env-disagree" not in ids(snapshot)
