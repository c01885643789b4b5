"""A split's predicted draw against the caps in force and every declared budget (issue 16, item 5):
the pure function the split screen calls, and `gpumix plan --json` on the demo."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from gpumix.power.split_draw import IDLE_SHARE_PRIOR, draw_against_budgets

TOOL = [sys.executable, "-m", "gpumix.cli.main"]


def gpu(index: int, draw_w: float, cap_w: float = 350.0) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "lost": False, "power_w": draw_w, "power_cap_w": cap_w,
            "power_limit_default_w": 350.0, "tier": "RTX 3090 24G"}


def rank(index: int, compute_s: float, step_s: float) -> dict[str, Any]:
    return {"rank": index, "gpu_uuid": f"GPU-{index}", "connected": True, "compute_s": compute_s, "step_time_s": step_s}


def split(*computes: float, step_s: float) -> dict[str, Any]:
    return {"proposed": {"step_time_s": step_s},
            "ranks": [{"rank": i, "gpu_uuid": f"GPU-{i}", "predicted_compute_s": c} for i, c in enumerate(computes)]}


# Two 3090s now: GPU 0 computes the whole 0.4 s step at 300 W, GPU 1 computes 0.2 s of it at 180 W (it waits).
SNAPSHOT = {"gpus": [gpu(0, 300.0), gpu(1, 180.0)], "ranks": [rank(0, 0.4, 0.4), rank(1, 0.2, 0.4)],
            "power_budget_w": 600.0}


def test_a_balanced_split_makes_the_waiting_card_draw_more_and_passes_the_budget() -> None:
    power = draw_against_budgets(SNAPSHOT, split(0.3, 0.3, step_s=0.3))
    by_gpu = {g["index"]: g for g in power["gpus"]}
    idle = IDLE_SHARE_PRIOR * 350
    # GPU 1: from 50 % busy to 100 %: idle + (180 - idle) x 2
    assert by_gpu[1]["predicted_w"] == pytest.approx(idle + (180 - idle) * 2)
    assert by_gpu[0]["predicted_w"] == pytest.approx(300.0)  # busy all the step before and after
    assert power["predicted_total_w"] == pytest.approx(300 + idle + (180 - idle) * 2)
    (total,) = power["budgets"]
    assert total["over"] and total["usable_w"] == 600
    assert power["warning"].startswith("predicted draw exceeds GPU budget 632 W > 600 W")


def test_no_card_is_predicted_above_its_cap_and_a_newly_capped_card_is_named() -> None:
    snapshot = {**SNAPSHOT, "gpus": [gpu(0, 300.0), gpu(1, 180.0, cap_w=250.0)], "power_budget_w": 2000.0}
    power = draw_against_budgets(snapshot, split(0.3, 0.3, step_s=0.3))
    by_gpu = {g["index"]: g for g in power["gpus"]}
    assert by_gpu[1]["predicted_w"] == 250.0 and by_gpu[1]["at_cap"] and not by_gpu[0]["at_cap"]
    assert power["warning"] == "GPU 1 would run at its cap: slower than this prediction"


def test_a_card_left_out_of_the_split_idles() -> None:
    plan = split(0.4, 0.0, step_s=0.4)
    plan["ranks"][1]["predicted_compute_s"] = 0.0
    power = draw_against_budgets(SNAPSHOT, plan)
    assert power["gpus"][1]["predicted_w"] == pytest.approx(IDLE_SHARE_PRIOR * 350) and power["warning"] is None


def test_every_supply_and_circuit_is_checked() -> None:
    layout = {"headroom": 0.1, "slot_share": 0.0,
              "circuits": [{"name": "wall", "volts": 230, "amps": 3}],  # 552 W continuous
              "supplies": [{"name": "psu-a", "rating_w": 1000, "gpus": [0], "board": True, "circuit": "wall"},
                           {"name": "psu-b", "rating_w": 300, "gpus": [1], "circuit": "wall", "efficiency": 1.0}]}
    power = draw_against_budgets({**SNAPSHOT, "power_budget_w": None, "power_layout": layout},
                                 split(0.3, 0.3, step_s=0.3))
    over = {b["name"]: b["over"] for b in power["budgets"]}
    assert over == {"psu-a": False, "psu-b": True, "wall": True}  # psu-b: 344 W of 270 W usable
    assert "psu-b" in power["warning"] and "wall" in power["warning"] and "psu-a" not in power["warning"]


@pytest.mark.parametrize("nonsense", [float("nan"), float("inf"), -5.0, "300", None, True])
def test_hostile_readings_give_no_nonsense(nonsense: Any) -> None:
    snapshot = {**SNAPSHOT, "gpus": [gpu(0, 300.0), {**gpu(1, 180.0), "power_w": nonsense}],
                "ranks": [rank(0, 0.4, 0.4), {**rank(1, 0.2, 0.4), "compute_s": nonsense}]}
    power = draw_against_budgets(snapshot, split(0.3, nonsense, step_s=0.3))  # type: ignore[arg-type]
    assert all(0 <= g["predicted_w"] <= g["cap_w"] for g in power["gpus"])
    json.dumps(power, allow_nan=False)


def test_plan_json_on_the_demo_carries_the_draw_and_warns_above_its_budget() -> None:
    done = subprocess.run([*TOOL, "plan", "--demo", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    power = data["power"]
    assert all(r["predicted_compute_s"] > 0 for r in data["ranks"])
    # the demo rig: stock caps (3300 W) over a 2800 W budget, and a split that makes the 3090s and 4090s busy
    total = next(b for b in power["budgets"] if b["kind"] == "total")
    assert total["limit_w"] == 2800 and total["over"] and power["predicted_total_w"] > power["draw_now_total_w"]
    assert {b["kind"] for b in power["budgets"]} == {"total", "supply", "circuit"}
    assert all(g["predicted_w"] <= g["cap_w"] for g in power["gpus"])
    assert "exceeds GPU budget" in power["warning"]


def test_a_card_whose_cap_did_not_read_is_named_not_dropped_in_silence() -> None:
    # its draw cannot be predicted without its cap: the totals leave it out, and the warning says so
    snapshot = {**SNAPSHOT, "gpus": [gpu(0, 300.0), {**gpu(1, 180.0), "power_cap_w": None}], "power_budget_w": 2000.0}
    power = draw_against_budgets(snapshot, split(0.3, 0.3, step_s=0.3))
    assert [g["index"] for g in power["gpus"]] == [0] and power["predicted_total_w"] == pytest.approx(300.0)
    assert power["warning"] == "GPU 1: cap not read, its draw is not in these totals"
