"""`gpumix power` as a user runs it (real processes, on the simulator): show, set, reset, fit, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumix.power.caps import audit_log_path

TOOL = [sys.executable, "-m", "gpumix.cli.main"]
RIG = str(Path(__file__).parents[1] / "gpumix" / "rigs" / "mixed10.toml")  # the demo rig, without the demo job


def power(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, "power", *args], capture_output=True, text=True, timeout=60, env=dict(os.environ))


def assert_one_line_failure(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> str:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpumix")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def audit_lines() -> list[dict]:
    path = audit_log_path()
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_show_demo_lists_the_ten_gpus() -> None:
    result = power("show", "--demo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["GPU", "tier", "draw"]
    rows = lines[1:-1]
    assert [int(row.split()[0]) for row in rows] == list(range(10))
    assert "RTX 3060 12G" in rows[0] and "100-200" in rows[0] and "RTX 4090 24G" in rows[9] and "150-600" in rows[9]
    assert lines[-1] == "sum of caps 3300 W, budget 2800 W"


def test_show_json() -> None:
    result = power("show", "--sim", RIG, "--json")
    assert result.returncode == 0, result.stderr
    gpus = json.loads(result.stdout)
    assert len(gpus) == 10
    assert set(gpus[7]) == {"index", "uuid", "tier", "power_w", "power_cap_w", "power_limit_default_w",
                            "power_limit_min_w", "power_limit_max_w"}
    assert (gpus[7]["power_cap_w"], gpus[7]["power_limit_min_w"], gpus[7]["power_limit_max_w"]) == (450, 150, 600)


def test_set_prints_the_change_and_logs_it() -> None:
    result = power("set", "7", "300", "--sim", RIG)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "GPU 7: set cap 450 W -> 300 W"
    lines = audit_lines()
    assert len(lines) == 1 and (lines[0]["gpu_index"], lines[0]["old_w"], lines[0]["new_w"]) == (7, 450, 300)


def test_set_json_reads_the_cap_back() -> None:
    result = power("set", "7", "300", "--sim", RIG, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cap_now_w"] == 300 and data["dry_run"] is False and data["new_w"] == 300


@pytest.mark.parametrize("watts", ["700", "149", "-5"])
def test_set_out_of_range_is_one_line_and_exit_1(watts: str) -> None:
    line = assert_one_line_failure(power("set", "7", watts, "--sim", RIG), 1, "GPU 7", "150–600 W")
    assert "outside that range" in line
    assert audit_lines() == []


def test_set_dry_run_json_shape() -> None:
    result = power("set", "7", "300", "--sim", RIG, "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"time_s", "user", "gpu_index", "gpu_uuid", "old_w", "new_w", "dry_run", "cap_now_w"}
    assert (data["gpu_index"], data["old_w"], data["new_w"], data["dry_run"], data["cap_now_w"]) == (7, 450, 300, True, None)
    assert data["gpu_uuid"].startswith("GPU-")
    assert audit_lines() == []
    text = power("set", "7", "300", "--sim", RIG, "--dry-run")
    assert text.stdout.strip() == "GPU 7: would set cap 450 W -> 300 W"


def test_reset() -> None:
    result = power("reset", "7", "--sim", RIG)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "GPU 7: set cap 450 W -> 450 W"


@pytest.mark.parametrize("action", [["reset", "12"], ["set", "12", "300"]])
def test_unknown_gpu_is_one_line(action: list[str]) -> None:
    assert_one_line_failure(power(*action, "--sim", RIG), 1, "no GPU 12", "0–9")


def test_bad_arguments_are_one_line() -> None:
    assert_one_line_failure(power("set", "7", "lots", "--sim", RIG), 2, "argument watts: not a number")
    assert_one_line_failure(power("--sim", RIG), 2, "required")
    assert_one_line_failure(power("show", "--sim", "/nonexistent/rig.toml"), 2, "cannot read rig file")


def test_fit_demo_dry_run_json() -> None:
    result = power("fit", "--demo", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    fit = json.loads(result.stdout)
    assert fit["applied"] is False and fit["budget_w"] == 2800 and fit["caps_before_w"] == 3300
    ranges = {0: (100, 200), 3: (100, 400), 6: (100, 480), 7: (150, 600)}
    ranges = {i: ranges[max(k for k in ranges if k <= i)] for i in range(10)}
    assert [g["index"] for g in fit["gpus"]] == list(range(10))
    for gpu in fit["gpus"]:
        low, high = ranges[gpu["index"]]
        assert low <= gpu["new_w"] <= high and gpu["new_w"] <= gpu["old_w"]
    assert sum(g["new_w"] for g in fit["gpus"]) <= 2800 and fit["caps_after_w"] <= 2800
    # the demo job runs: the slow 3060s pace it and keep their watts, the waiting cards give theirs
    assert [g["new_w"] for g in fit["gpus"][:3]] == [170, 170, 170]
    assert fit["throughput_kept"] == pytest.approx(1.0) and fit["step_before_s"] is not None
    assert audit_lines() == []


def test_fit_applies_on_a_sim_rig_with_a_budget_flag() -> None:
    result = power("fit", "--sim", RIG, "--budget", "3000")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("caps 3300 W -> 3000 W for a 3000 W budget; predicted throughput kept")
    assert len(result.stdout.strip().splitlines()) == 11
    applied = audit_lines()
    assert applied and sum(line["old_w"] - line["new_w"] for line in applied) == pytest.approx(300)


def test_fit_below_the_minimums_is_one_line() -> None:
    assert_one_line_failure(power("fit", "--sim", RIG, "--budget", "900"), 1, "below the sum of the cards' minimum caps")


def test_fit_without_a_budget_is_one_line(tmp_path: Path) -> None:
    rig = tmp_path / "nobudget.toml"
    rig.write_text('name = "nb"\n[[gpus]]\nmodel = "rtx3090"\nslot_width = 16\n')
    assert_one_line_failure(power("fit", "--sim", str(rig)), 2, "needs --budget")
