"""DeepSpeed split: common accumulation steps, per-rank micro-batches, one config per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumix.plan.deepspeed import common_accumulation, deepspeed_split, write_configs

ROOT = Path(__file__).parents[1]


def planner_json(samples: list[int], k: list[int]) -> dict:
    return {"global_batch": sum(samples), "ranks": [
        {"rank": r, "samples": n, "micro_batch": n // kk, "accumulation_steps": kk, "loss_weight": 0.0}
        for r, (n, kk) in enumerate(zip(samples, k, strict=True))]}


def test_common_accumulation_divides_the_batch() -> None:
    assert common_accumulation(640, 1) == 1
    assert common_accumulation(640, 3) == 4
    assert common_accumulation(7, 2) == 7


@given(st.lists(st.integers(1, 200), min_size=2, max_size=10), st.integers(1, 4))
def test_split_keeps_the_batch_and_one_k(samples: list[int], needed: int) -> None:
    data = planner_json(samples, [needed] * len(samples))
    try:
        split = deepspeed_split(data)
    except ValueError:
        assert sum(samples) // common_accumulation(sum(samples), needed) < len(samples)
        return
    k = split["accumulation_steps"]
    assert k >= needed and sum(samples) % k == 0
    assert sum(r["samples"] for r in split["ranks"]) == sum(samples)
    for rank in split["ranks"]:
        assert rank["micro_batch"] >= 1 and rank["samples"] == rank["micro_batch"] * k
        assert rank["loss_weight"] == pytest.approx(rank["samples"] * len(samples) / sum(samples))


def test_configs_per_rank(tmp_path: Path) -> None:
    split = deepspeed_split(planner_json([28, 62, 102], [1, 1, 2]))
    paths = write_configs(split, {"zero_optimization": {"stage": 2}, "train_batch_size": 999}, tmp_path)
    configs = [json.loads(p.read_text()) for p in paths]
    assert [c["gradient_accumulation_steps"] for c in configs] == [2, 2, 2]
    assert [c["train_micro_batch_size_per_gpu"] * 2 for c in configs] == [r["samples"] for r in split["ranks"]]
    assert all(c["zero_optimization"] == {"stage": 2} for c in configs)
    assert [c["train_batch_size"] for c in configs] == [c["train_micro_batch_size_per_gpu"] * 2 * 3 for c in configs]


def test_ranks_left_out_get_no_config() -> None:
    data = planner_json([1, 1, 62, 102], [1, 1, 1, 1])
    for left_out in data["ranks"][:2]:
        left_out.update(samples=0, micro_batch=0, accumulation_steps=0)
    data["global_batch"] = 164
    split = deepspeed_split(data)
    assert [r["rank"] for r in split["ranks"]] == [0, 1]  # renumbered, as the relaunch numbers them
    assert sum(r["samples"] for r in split["ranks"]) == 164
    assert all(r["loss_weight"] == pytest.approx(r["samples"] * 2 / 164) for r in split["ranks"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "deepspeed"])
def test_unequal_split_gives_the_full_batch_update(mode: str, tmp_path: Path) -> None:
    """DDP (float64) and DeepSpeed ZeRO-2 (fp32) on 2 CPU ranks: weighted matches, unweighted does not."""
    if mode == "deepspeed":
        pytest.importorskip("deepspeed")
    out = tmp_path / "result.json"
    # one launch: a crash (a gloo rank aborting in its transport included) fails the test
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(ROOT / "benchmarks" / "weighted_check.py"), "--mode", mode, "--out", str(out)],
        capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    causes = [line for line in result.stderr.splitlines() if "what()" in line or "Error" in line][:10]
    assert result.returncode == 0, "\n".join(causes) + "\n" + result.stderr[-2000:]
    data = json.loads(out.read_text())
    tolerance = 1e-12 if mode == "ddp" else 1e-6
    assert data["max_abs_diff_weighted"] < tolerance
    assert data["max_abs_diff_unweighted"] > 1e-3


def test_a_deepspeed_plan_keeps_its_configs_and_one_k() -> None:
    from gpumix.wire.plan_file import RunPlan

    split = deepspeed_split(planner_json([28, 62, 102], [1, 1, 2]))
    data = {"plan_id": "ds", **split, "deepspeed_configs": ["/c/r0.json", "/c/r1.json", "/c/r2.json"]}
    plan = RunPlan.from_json(data)
    assert RunPlan.from_json(plan.to_json()) == plan  # as the hub and the plan file pass it on
    assert plan.deepspeed_config(2) == "/c/r2.json" and RunPlan.from_json(split).deepspeed_config(0) is None
    per_rank_k = {**data, "ranks": planner_json([28, 62, 102], [1, 1, 2])["ranks"]}
    for rank in per_rank_k["ranks"]:
        rank["loss_weight"] = 1.0
    with pytest.raises(ValueError, match="same accumulation steps"):  # ZeRO-2 aborts, ZeRO-3 hangs
        RunPlan.from_json(per_rank_k)
    for configs in (["/c/r0.json"], ["/c/r0.json", "", "/c/r2.json"], ["/c/r0.json", 7, "/c/r2.json"],
                    ["/c/" + "x" * 5000, "/c/r1.json", "/c/r2.json"], "/c/r0.json"):
        with pytest.raises(ValueError, match="one config file per rank"):
            RunPlan.from_json({**data, "deepspeed_configs": configs})
