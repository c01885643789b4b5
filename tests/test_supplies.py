"""Budgets that match the wiring: the layout file, each supply's and circuit's load, and a fit that
respects every budget at once with headroom for transients."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumix.hub import Hub
from gpumix.power.budget import BudgetError, fit_to_budget
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot
from gpumix.power.supplies import (
    LayoutError,
    budgets,
    fit_to_layout,
    load_layout,
    loads,
    parse_layout,
)

SHIPPED = Path(__file__).parent.parent / "gpumix" / "rigs" / "mixed10.power.toml"
STOCK_CAPS = {0: 170, 1: 170, 2: 170, 3: 350, 4: 350, 5: 350, 6: 390, 7: 450, 8: 450, 9: 450}

# A 4090 supply too small for three 4090s at stock caps: a fit to the total alone misses it.
SMALL_4090_SUPPLY = """
[power]
headroom = 0.10
[[power.circuits]]
name = "wall"
volts = 230
amps = 16
[[power.supplies]]
name = "main"
rating_w = 1600
circuit = "wall"
board = true
other_w = 200
gpus = [0, 1, 2, 3, 4, 5, 6]
[[power.supplies]]
name = "psu-4090"
rating_w = 1000
circuit = "wall"
gpus = [7, 8, 9]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "power.toml"
    path.write_text(text)
    return path


def test_the_shipped_layout_loads_at_stock_caps() -> None:
    layout = load_layout(SHIPPED, gpu_count=10)
    load = {b.name: b.load_w(STOCK_CAPS) for b in budgets(layout)}
    assert all(b.load_w(STOCK_CAPS) <= b.limit_w * 0.9 for b in budgets(layout))  # stock caps fit
    # main: 250 W board + 85 % of three 3060s + 15 % (the slots) of all ten cards' 3300 W
    assert load["psu-main"] == pytest.approx(250 + 0.85 * 510 + 0.15 * 3300)
    assert load["psu-4090"] == pytest.approx(0.85 * 1350)
    assert load["wall-A"] == pytest.approx((load["psu-main"] + load["psu-4090"]) / 0.92)
    assert [c.limit_w for c in layout.circuits] == [230 * 16 * 0.8] * 2


def test_loads_from_a_snapshot(demo_hub: Hub) -> None:
    layout = load_layout(SHIPPED, gpu_count=10)
    rows = {r["name"]: r for r in loads(layout, demo_hub.snapshot()["gpus"])}
    assert rows["psu-4090"]["gpus"] == [7, 8, 9] and rows["psu-4090"]["usable_w"] == pytest.approx(1170)
    assert 0 < rows["psu-4090"]["draw_w"] <= rows["psu-4090"]["caps_w"] == pytest.approx(0.85 * 1350)


@pytest.mark.parametrize(("text", "line"), [
    ("[power]\nsupplies = []", "power.supplies: must be a list of 1-32 tables"),
    ("[power]\nvolts = 3\n[[power.supplies]]\nname='a'\nrating_w=1000\nboard=true\ngpus=[0,1]",
     "power.volts: unknown field"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\nboard=true\ngpus=[0]",
     "power.supplies: GPU 1 is fed by no supply"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\nboard=true\ngpus=[0,1]\n"
     "[[power.supplies]]\nname='b'\nrating_w=1000\ngpus=[1]", "GPU 1's power cables are fed by two supplies"),
    ("[[power.supplies]]\nname='a'\nrating_w=nan\nboard=true\ngpus=[0,1]", "rating_w: must be a number from 50"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\nboard=true\ngpus=[0,7]", "gpus: no GPU 7 (GPUs 0-1)"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\ncircuit='x'\nboard=true\ngpus=[0,1]",
     "circuit: no circuit named 'x'"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\ngpus=[0,1]", "no supply has board = true"),
    ("[[power.supplies]]\nname='a'\nrating_w=1000\nboard=true\ngpus=[0,1]\n"
     "[[power.supplies]]\nname='b'\nrating_w=1000\nboard=true", "only one supply feeds the main board"),
    ("[[power.supplies]]\nname=\"\\u001b[31m\"\nrating_w=1000\nboard=true\ngpus=[0,1]", "name: must be printable"),
    ("[power\n", "not TOML"),
    ("name = 'a rig without power'", "no [power] table"),
])
def test_a_bad_layout_is_one_line(tmp_path: Path, text: str, line: str) -> None:
    with pytest.raises(LayoutError) as error:
        load_layout(write(tmp_path, text), gpu_count=2)
    message = str(error.value)
    assert line in message and "\n" not in message and message.startswith(str(tmp_path))


def test_a_file_too_large_or_not_text(tmp_path: Path) -> None:
    big = write(tmp_path, "#" * 70_000)
    with pytest.raises(LayoutError, match="larger than 64 KiB"):
        load_layout(big)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[power]")
    with pytest.raises(LayoutError, match="not UTF-8"):
        load_layout(binary)
    with pytest.raises(LayoutError, match="cannot read"):
        load_layout(tmp_path / "missing.toml")


def test_headroom_is_checked() -> None:
    layout = parse_layout({"supplies": [{"name": "a", "rating_w": 1000, "board": True, "gpus": [0]}]}, 1)
    assert layout.with_headroom(0.2).headroom == 0.2
    for bad in (-0.1, 0.95, float("nan")):
        with pytest.raises(LayoutError, match="headroom must be a share"):
            layout.with_headroom(bad)


def test_the_fit_respects_every_supply_and_circuit_and_the_total(demo_hub: Hub, tmp_path: Path) -> None:
    layout = load_layout(write(tmp_path, SMALL_4090_SUPPLY), gpu_count=10)
    gpus = gpu_power_from_snapshot(demo_hub.snapshot())
    # a fit to the machine's total alone cuts the waiting cards, and leaves the 4090 supply overloaded
    total_only = {p.index: p.new_w for p in fit_to_budget(gpus, 2800).proposals}
    psu_4090 = next(b for b in budgets(layout) if b.name == "psu-4090")
    assert psu_4090.load_w(total_only) > 900
    fit = fit_to_layout(gpus, layout, total_budget_w=2800)
    caps = {p.index: p.new_w for p in fit.proposals}
    for budget in budgets(layout):
        assert budget.load_w(caps) <= budget.limit_w * 0.9 + 1e-6, budget.name
    assert sum(caps.values()) <= 2800 + 1e-6 and fit.caps_after_w == pytest.approx(sum(caps.values()))
    assert all(g.min_w <= caps[g.index] <= g.cap_w for g in gpus)
    assert 0 < fit.throughput_kept <= 1.0
    cut = [p for p in fit.proposals if p.index >= 7]
    assert all(p.new_w < p.old_w and "psu-4090" in p.reason for p in cut)


def test_more_headroom_gives_lower_caps(demo_hub: Hub, tmp_path: Path) -> None:
    layout = load_layout(write(tmp_path, SMALL_4090_SUPPLY), gpu_count=10)
    gpus = gpu_power_from_snapshot(demo_hub.snapshot())
    loose = fit_to_layout(gpus, layout).caps_after_w
    tight = fit_to_layout(gpus, layout.with_headroom(0.25)).caps_after_w
    assert tight < loose


def test_a_budget_the_minimum_caps_cannot_meet_is_one_line(demo_hub: Hub, tmp_path: Path) -> None:
    text = SMALL_4090_SUPPLY.replace("rating_w = 1000", "rating_w = 400")
    layout = load_layout(write(tmp_path, text), gpu_count=10)
    with pytest.raises(BudgetError, match="supply psu-4090: even at the cards' minimum caps"):
        fit_to_layout(gpu_power_from_snapshot(demo_hub.snapshot()), layout)


def test_nothing_to_cut_when_every_budget_holds(demo_hub: Hub) -> None:
    layout = load_layout(SHIPPED, gpu_count=10).with_headroom(0.0)
    gpus = gpu_power_from_snapshot(demo_hub.snapshot())
    fit = fit_to_layout(gpus, layout)
    assert all(p.new_w == p.old_w for p in fit.proposals) and fit.throughput_kept == pytest.approx(1.0)


def test_the_hubs_fit_respects_the_layout(demo_hub: Hub, tmp_path: Path) -> None:
    layout = load_layout(write(tmp_path, SMALL_4090_SUPPLY), gpu_count=10)
    demo_hub.hardware.power_layout = layout.to_json()
    demo_hub.tick()
    reply = demo_hub.control({"type": "power", "action": "fit", "budget_w": 2800, "headroom": 0.15})
    assert reply["ok"], reply
    caps = {g["index"]: g["power_cap_w"] for g in demo_hub.snapshot()["gpus"]}
    for budget in budgets(layout):
        assert budget.load_w(caps) <= budget.limit_w * 0.85 + 1.0, budget.name  # caps applied in whole watts
    assert sum(caps.values()) <= 2800 + 1.0
    bad = demo_hub.control({"type": "power", "action": "fit", "headroom": 2.0})
    assert not bad["ok"] and "headroom must be a share" in bad["message"]


def test_power_fit_and_doctor_on_the_demo_rig_use_its_supplies() -> None:
    import json
    import subprocess
    import sys

    tool = [sys.executable, "-m", "gpumix.cli.main"]
    doctor = subprocess.run([*tool, "doctor", "--demo", "--json"], capture_output=True, text=True, timeout=120)
    assert not [f for f in json.loads(doctor.stdout)["findings"] if f["id"].endswith("-over-limit")], doctor.stderr
    # a budget above the stock caps' 3300 W: only the supplies and circuits bind
    fit = subprocess.run([*tool, "power", "--sim", str(SHIPPED.parent / "scenario_overloaded_psu.toml"), "--json",
                          "--dry-run", "fit", "--budget", "5000"], capture_output=True, text=True, timeout=120)
    assert fit.returncode == 0, fit.stderr
    caps = {p["index"]: p["new_w"] for p in json.loads(fit.stdout)["gpus"]}
    assert caps[1] < 450 and caps[2] < 450
    for budget in budgets(load_layout(SHIPPED.parent / "scenario_overloaded_psu.power.toml", gpu_count=3)):
        assert budget.load_w(caps) <= budget.limit_w * 0.9 + 1e-6, budget.name
