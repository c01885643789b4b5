"""The field's lessons as findings, each on a rig or job built for it, and silence on a healthy one:
DataParallel, uneven memory, launch-bound steps, mixed precision, supplies and circuits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumix.advice.advisor import AdvisorSettings, findings
from gpumix.advice.field import field_findings
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.power.supplies import load_layout
from gpumix.sim.machine import GpuActivity
from gpumix.sim.rig import load_builtin_rig, load_rig
from tests.conftest import ManualClock, ticked_hub

GIB = 1024**3
RIGS = Path(__file__).parent / "rigs"
SHIPPED = Path(__file__).parent.parent / "gpumix" / "rigs"
GOOD_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}


def quiet_hub(rig: str = "mixed-10", clock: ManualClock | None = None) -> Hub:
    """A hub on a rig whose GPUs are idle until the test drives them (no synthetic job)."""
    clock = clock or ManualClock()
    rig_data = load_builtin_rig(rig) if not rig.endswith(".toml") else load_rig(rig)
    hardware = simulated_hardware(rig_data, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    hardware.machine.synthetic_job = False
    hub = ticked_hub(hardware, clock)
    hub.test_clock = clock  # type: ignore[attr-defined]
    return hub


def drive(hub: Hub, index: int, util_pct: float = 95.0, mem_bytes: float = 8 * GIB,
          pids: list[int] | None = None) -> None:
    hub.hardware.machine.set_activity(index, GpuActivity(busy_fraction=util_pct / 100, util_pct=util_pct,
                                                         mem_used_bytes=int(mem_bytes), pids=pids or []))


def tick(hub: Hub) -> dict[str, Any]:
    hub.tick()
    hub.test_clock.advance(1.0)  # type: ignore[attr-defined]
    return hub.snapshot()


def add_job(hub: Hub, gpus: list[int], steps: list[dict[str, Any]] | None = None, count: int = 12,
            job: str = "train", **fields: Any) -> list[Any]:
    """Rank r on GPU gpus[r], each with its own pid, reporting `count` steps of `fields`
    (per-rank values as lists); `steps[r]` overrides per step."""
    uuids = [g["uuid"] for g in hub.snapshot()["gpus"]]
    keys = []
    for rank, gpu in enumerate(gpus):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(gpus), "job": job, "pid": 5000 + rank,
                                           "gpu_uuid": uuids[gpu], "env": GOOD_ENV}))
        for step in range(count):
            values = {k: (v[rank] if isinstance(v, list) else v) for k, v in fields.items()}
            values.setdefault("step_time_s", 0.5)
            if steps is not None:
                values.update(steps[rank](step))
            hub.agent_step(key, parse_step({"step": step, **values}))
        keys.append(key)
    return keys


def only(snapshot: dict[str, Any], finding_id: str, settings: AdvisorSettings | None = None) -> Any:
    found = [f for f in findings(snapshot, settings) if f.id == finding_id]
    assert len(found) == 1, [f.id for f in findings(snapshot, settings)]
    return found[0]


def field_ids(snapshot: dict[str, Any]) -> set[str]:
    return {f.id for f in field_findings(snapshot)}


# -- DataParallel ------------------------------------------------------------------------------------


def test_one_process_on_two_gpus_is_dataparallel() -> None:
    hub = quiet_hub()
    drive(hub, 3, mem_bytes=20 * GIB, pids=[4242])  # the first GPU gathers outputs and holds more
    drive(hub, 4, mem_bytes=7 * GIB, pids=[4242])
    snapshot = tick(hub)
    finding = only(snapshot, "data-parallel")
    assert finding.gpus == [3, 4] and finding.severity == "warning"
    assert "process 4242 (python: python train.py) holds memory on GPU 3 20.0 GiB, GPU 4 7.0 GiB" in finding.evidence
    assert "`torchrun --standalone --nproc_per_node=2 train.py`" in finding.fix
    uneven = only(snapshot, "uneven-memory")
    assert uneven.gpus == [3, 4] and "GPU 3 20.0 GiB, GPU 4 7.0 GiB; GPU 3 hold" in uneven.evidence
    assert {"data-parallel", "uneven-memory"} <= {f["id"] for f in snapshot["findings"]}  # what the hub serves


def test_ddp_ranks_one_gpu_each_are_not_dataparallel() -> None:
    hub = quiet_hub()
    for index in (3, 4):
        drive(hub, index, mem_bytes=10 * GIB, pids=[5000 + index - 3])
    add_job(hub, [3, 4], comm_s=0.05, samples=32)
    assert not field_ids(tick(hub)) & {"data-parallel", "uneven-memory"}


def test_a_ddp_rank_touching_gpu0_is_not_dataparallel() -> None:
    hub = quiet_hub()
    drive(hub, 3, mem_bytes=10 * GIB, pids=[5000, 5001])  # rank 1's stray context on GPU 3
    drive(hub, 4, mem_bytes=10 * GIB, pids=[5001])
    add_job(hub, [3, 4], comm_s=0.05, samples=32)
    assert "data-parallel" not in field_ids(tick(hub))


def test_the_agent_seeing_dataparallel() -> None:
    hub = quiet_hub()
    add_job(hub, [3], dp_devices=2, samples=64)
    finding = only(hub.snapshot(), "data-parallel")
    assert "wraps its model in torch.nn.DataParallel over 2 devices" in finding.evidence
    assert "--nproc_per_node=2" in finding.fix


# -- uneven memory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mems_gib", "samples", "flagged"), [
    ([10, 10, 18], [32, 32, 32], [5]),   # a leak on rank 2
    ([10, 10, 11], [32, 32, 32], None),  # within what noise explains
    ([10, 10, 18], [32, 32, 64], None),  # rank 2 takes twice the samples: its split explains it
])
def test_uneven_memory_beyond_the_split(mems_gib: list[int], samples: list[int], flagged: list[int] | None) -> None:
    hub = quiet_hub()
    for offset, mem in enumerate(mems_gib):
        drive(hub, 3 + offset, mem_bytes=mem * GIB, pids=[5000 + offset])
    add_job(hub, [3, 4, 5], comm_s=0.05, samples=samples)
    snapshot = tick(hub)
    if flagged is None:
        assert "uneven-memory" not in field_ids(snapshot)
        return
    finding = only(snapshot, "uneven-memory")
    assert finding.gpus == flagged
    assert "rank 0 (GPU 3) 10.0 GiB at 32 samples, rank 1 (GPU 4) 10.0 GiB at 32 samples," in finding.evidence
    assert "rank 2 (GPU 5) hold more than 1.25x" in finding.evidence


# -- launch-bound steps -------------------------------------------------------------------------------------


def test_short_steps_low_utilisation_busy_cpu_are_launch_bound() -> None:
    hub = quiet_hub()
    drive(hub, 7, util_pct=35.0, mem_bytes=6 * GIB, pids=[5000])
    add_job(hub, [7], step_time_s=0.012, comm_s=0.0005, data_wait_s=0.0002, samples=8, micro_batch=8,
            cpu_pct=99.0, mem_peak_bytes=4 * GIB)
    finding = only(tick(hub), "launch-bound")
    assert finding.gpus == [7]
    assert "steps of 12.0 ms, GPU 7 busy 35 % while the rank's process uses 99 % of a core" in finding.evidence
    # 24 GiB x 0.9 x 8 / 4 GiB: what the planner's memory model allows
    assert "memory allows up to 43 where it runs 8" in finding.fix and "CUDA Graphs" in finding.fix


@pytest.mark.parametrize("change", [
    {"step_time_s": 0.5, "comm_s": 0.02},  # long steps
    {"cpu_pct": 30.0},  # the CPU is idle: not launches
    {"data_wait_s": 0.006},  # waiting for data: the loader's problem
])
def test_not_launch_bound(change: dict[str, Any]) -> None:
    hub = quiet_hub()
    drive(hub, 7, util_pct=35.0, pids=[5000])
    fields = {"step_time_s": 0.012, "comm_s": 0.0005, "samples": 8, "cpu_pct": 99.0, **change}
    add_job(hub, [7], **fields)
    assert "launch-bound" not in field_ids(tick(hub))


def test_busy_gpu_is_not_launch_bound() -> None:
    hub = quiet_hub()
    drive(hub, 7, util_pct=97.0, pids=[5000])
    add_job(hub, [7], step_time_s=0.012, comm_s=0.0005, samples=8, cpu_pct=99.0)
    assert "launch-bound" not in field_ids(tick(hub))


# -- mixed precision -------------------------------------------------------------------------------------------


def test_fp32_on_tensor_core_cards() -> None:
    hub = quiet_hub()
    add_job(hub, [3, 7], amp_autocast=0, amp_dtype="float32", samples=32)
    finding = only(hub.snapshot(), "fp32-on-tensor-cores")
    assert finding.gpus == [3, 7] and finding.severity == "info"
    assert "rank 0 on GPU 3 (NVIDIA GeForce RTX 3090), rank 1 on GPU 7 (NVIDIA GeForce RTX 4090)" in finding.evidence
    assert "torch.bfloat16" in finding.fix


def test_autocast_on_or_unknown_says_nothing_about_fp32() -> None:
    hub = quiet_hub()
    add_job(hub, [3], amp_autocast=1, amp_dtype="bfloat16", samples=32)
    add_job(hub, [4], job="unknown", samples=32)  # an agent that reports no precision: no guess
    assert "fp32-on-tensor-cores" not in field_ids(hub.snapshot())


def test_a_scale_that_keeps_collapsing() -> None:
    hub = quiet_hub()
    # every other step overflows: the scale halves each time, from 65536 down
    add_job(hub, [3], count=40, samples=32, amp_autocast=1, amp_dtype="float16",
            steps=[lambda s: {"loss_scale": 65536.0 / 2 ** (s // 2), "amp_skipped_steps": (s + 1) // 2}])
    rank = hub.snapshot()["ranks"][0]
    assert rank["amp_skipped_share"] == pytest.approx(20 / 39) and rank["amp_window_steps"] == 39
    finding = only(hub.snapshot(), "loss-scale-collapsing")
    assert finding.severity == "error"  # 65536 / 2^19 = 0.125: below 1
    assert "loss scale 0.125 (a GradScaler starts at 65536); 51 % of the last 39 steps skipped" in finding.evidence
    assert "(float16 autocast)" in finding.evidence and "bfloat16" in finding.fix


def test_a_healthy_scaler_is_quiet() -> None:
    hub = quiet_hub()
    # one overflow early, then the scale holds at 32768
    add_job(hub, [3], count=40, samples=32, amp_autocast=1, amp_dtype="float16",
            steps=[lambda s: {"loss_scale": 65536.0 if s < 3 else 32768.0, "amp_skipped_steps": 0 if s < 3 else 1}])
    assert "loss-scale-collapsing" not in field_ids(hub.snapshot())


def test_amp_fields_out_of_range_are_dropped_and_counted() -> None:
    step = parse_step({"step": 1, "step_time_s": 0.1, "loss_scale": -1.0, "amp_autocast": 3,
                       "amp_dtype": "[red]fp16[/red]", "amp_skipped_steps": 2, "dp_devices": 1e9})
    assert step["loss_scale"] is None and step["amp_autocast"] is None and step["amp_dtype"] is None
    assert step["dp_devices"] is None and step["amp_skipped_steps"] == 2
    assert set(step["rejected"]) == {"loss_scale", "amp_autocast", "amp_dtype", "dp_devices"}


# -- supplies and circuits ---------------------------------------------------------------------------------------


def test_mixed10_ships_a_multi_supply_layout() -> None:
    layout = load_layout(SHIPPED / "mixed10.power.toml", gpu_count=10)
    assert len(layout.supplies) >= 3 and len(layout.circuits) >= 2
    assert sorted(g for s in layout.supplies for g in s.gpus) == list(range(10))


def test_a_supply_and_a_circuit_whose_caps_add_up_above_their_limits() -> None:
    hub = quiet_hub()
    layout = load_layout(SHIPPED / "mixed10.power.toml", gpu_count=10)
    settings = AdvisorSettings(power_layout=layout)
    assert not [f for f in findings(hub.snapshot(), settings) if f.id.endswith("-over-limit")]  # stock caps fit
    for index in (7, 8, 9):  # the 4090s raised to their 600 W maximum
        assert hub.control({"type": "power", "action": "set", "gpus": [index], "watts": 600.0})["ok"]
    found = {f.id: f for f in findings(tick(hub), settings) if f.id.endswith("-over-limit")}
    supply, circuit = found["supply-over-limit"], found["circuit-over-limit"]
    assert supply.severity == circuit.severity == "error"
    assert supply.title == "Caps on supply psu-4090 add up above its limit" and supply.gpus == [7, 8, 9]
    assert "would load it with 1530 W" in supply.evidence and "against its 1300 W rating, 1170 W usable" in supply.evidence
    assert circuit.title == "Caps on wall circuit wall-A add up above its limit"
    assert "against its 2944 W continuous limit" in circuit.evidence and "gpumix power fit" in circuit.fix


def test_a_supply_in_its_headroom_is_a_warning(tmp_path: Path) -> None:
    layout = load_layout(SHIPPED / "mixed10.power.toml", gpu_count=10)
    snapshot = quiet_hub().snapshot()
    tight = layout.with_headroom(0.12)  # psu-4090 carries 1148 W at stock caps: above 88 % of 1300 W
    found = [f for f in findings(snapshot, AdvisorSettings(power_layout=tight)) if f.id.endswith("-over-limit")]
    assert [(f.id, f.severity, f.title) for f in found] == [
        ("supply-over-limit", "warning", "Caps on supply psu-4090 add up into its headroom")]


def test_doctor_json_on_the_overloaded_supply_rig() -> None:
    result = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "doctor", "--sim",
                             str(SHIPPED / "scenario_overloaded_psu.toml"), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "supply-over-limit"]
    assert finding["title"] == "Caps on supply psu-2x4090 add up above its limit" and finding["gpus"] == [1, 2]


def test_healthy_rig_and_job_have_no_field_findings() -> None:
    hub = quiet_hub(str(RIGS / "healthy.toml"))
    for index in (0, 1):
        drive(hub, index, util_pct=96.0, mem_bytes=18 * GIB, pids=[5000 + index])
    add_job(hub, [0, 1], step_time_s=0.4, comm_s=0.03, samples=32, micro_batch=32, cpu_pct=100.0,
            amp_autocast=1, amp_dtype="bfloat16", gradient_bytes=4e8, mem_peak_bytes=16 * GIB)
    snapshot = tick(hub)
    assert snapshot["findings"] == []


# -- the agent's mixed-precision report, from a real training process -----------------------------------------

AMP_TRAINER = r"""
import sys
import torch
import gpumix.agent
path, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu", init_scale=65536.0)
agent = gpumix.agent.Agent(path, job="amp")
agent.watch_amp(scaler, dtype=torch.bfloat16)
agent.watch_model(torch.nn.Linear(2, 2))  # not DataParallel: no dp_devices
for index in range(steps):
    with agent.step(samples=4) as step:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(torch.ones(4, 8)).float().sum()
        if index % 2:
            loss = loss * 1e38  # the scaled gradients overflow: GradScaler skips the step, halves the scale
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        step.loss = None if index % 2 else loss.detach()  # 1e38: beyond the hub's loss range
agent.close(5.0)
"""


@pytest.fixture
def hub_path(demo_hardware: Any) -> Any:
    import os
    import tempfile

    from gpumix.hub.server import HubServer

    hub = Hub(demo_hardware)
    hub.tick()
    folder = tempfile.mkdtemp(prefix="gmxa", dir="/tmp")  # short: Unix socket paths are limited
    path = os.path.join(folder, "hub.sock")
    server = HubServer(hub, path)
    server.start()
    yield hub, path
    server.stop()
    os.rmdir(folder)


def test_the_agent_reports_autocast_scale_and_skipped_steps(hub_path: Any) -> None:
    import os

    hub, path = hub_path
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUMIX_", "CUDA_VISIBLE"))}
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", AMP_TRAINER, path, "24"], cwd=Path(__file__).parent.parent,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (rank,) = [r for r in hub.snapshot()["ranks"] if r["job"] == "amp"]
    assert rank["step"] == 23 and rank["rejected_values"] == 0
    assert (rank["amp_autocast"], rank["amp_dtype"]) == (1, "bfloat16")
    assert rank["amp_skipped_steps"] == 12 and rank["loss_scale"] == 65536.0 / 2**12
    assert rank["dp_devices"] is None
    assert rank["amp_skipped_share"] == pytest.approx(12 / 23, abs=0.05)
    # the rank has ended (findings speak of live ranks): seen live, its figures make the finding
    snapshot = hub.snapshot()
    assert "loss-scale-collapsing" in field_ids({**snapshot, "ranks": [{**rank, "connected": True}]})


# -- in the TUI: the advice screen, the ranks view's precision columns, the host panel's supplies -------------


async def test_the_tui_shows_field_findings_precision_and_supplies(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    from textual.widgets import DataTable, Static

    from gpumix.tui.advice_screens import FindingsScreen
    from gpumix.tui.app import GpumixApp
    from gpumix.tui.ranks_screen import RanksScreen
    from tests.waiting import wait_until_async

    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    hub = quiet_hub()
    hub.hardware.power_layout = load_layout(SHIPPED / "mixed10.power.toml", gpu_count=10).to_json()
    add_job(hub, [3, 7], count=30, samples=32, amp_autocast=[0, 1], amp_dtype=["float32", "float16"],
            steps=[lambda s: {}, lambda s: {"loss_scale": 65536.0 / 2 ** (s // 2), "amp_skipped_steps": (s + 1) // 2}])
    tick(hub)
    app = GpumixApp(hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        host = await wait_until_async(lambda: "PSU psu-" in str(app.query_one("#host", Static).render())
                                      and app.query_one("#host", Static), 5.0, "the supplies line", pilot.pause)
        assert "psu-4090" in str(host.render())
        await pilot.press("f")
        screen = await wait_until_async(lambda: isinstance(app.screen, FindingsScreen) and app.screen, 5.0,
                                        "the findings", pilot.pause)
        await pilot.pause()
        text = str(screen.query_one("#findings-text", Static).render())
        assert "Training in fp32 on cards with tensor cores" in text
        assert "Rank 1's loss scale keeps collapsing" in text
        await pilot.press("f")
        await pilot.pause()
        await pilot.press("r")
        ranks = await wait_until_async(lambda: isinstance(app.screen, RanksScreen) and app.screen, 5.0,
                                       "the ranks view", pilot.pause)
        await pilot.pause()
        table = ranks.query_one(DataTable)
        rows = [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[0][-3:] == ["fp32", "N/A", "N/A"]
        assert rows[1][-3:] == ["fp16", f"{65536.0 / 2 ** 14:.6g}", "15 (52%)"]


# -- the demo world shows each finding when asked ---------------------------------------------------------


@pytest.mark.parametrize("name", ["data-parallel", "uneven-memory", "launch-bound", "mixed-precision", "cpu-forwarding"])
def test_each_demo_scenario_shows_its_finding(name: str) -> None:
    from gpumix.demo.scenarios import start_scenario

    hub = quiet_hub()
    scenario = start_scenario(hub, name)
    for _ in range(3):
        snapshot = tick(hub)
        assert scenario.finding in {f["id"] for f in snapshot["findings"]}, [f["id"] for f in snapshot["findings"]]


def test_the_cpu_forwarding_scenario_names_the_x1_riser_whatever_the_host_load() -> None:
    from gpumix.demo.scenarios import start_scenario

    hub = quiet_hub()
    start_scenario(hub, "cpu-forwarding")
    snapshot = tick(hub)
    for cpu_pct in (0.0, 100.0):  # the host's CPU load plays no part
        loaded = {**snapshot, "host": {**snapshot["host"], "cpu_pct": cpu_pct}}
        finding = only(loaded, "cpu-forwarding")
        assert finding.gpus == [2] and "paced by the link of GPU 2 (RTX 3060 12G, gen4 x1)" in finding.evidence
        assert "link shares while communicating: GPU 2 100 %" in finding.evidence


def test_the_cpu_forwarding_scenario_on_the_healthy_rig_is_quiet() -> None:
    from gpumix.demo.scenarios import start_scenario

    hub = quiet_hub(str(RIGS / "healthy.toml"))  # P2P works: the all-reduce does not cross host memory
    start_scenario(hub, "cpu-forwarding")
    assert "cpu-forwarding" not in {f["id"] for f in tick(hub)["findings"]}


def test_an_unknown_scenario_is_one_line() -> None:
    from gpumix.demo.scenarios import ScenarioError, start_scenario

    with pytest.raises(ScenarioError, match="unknown scenario 'nope' \\(known: cpu-forwarding, data-parallel"):
        start_scenario(quiet_hub(), "nope")


def test_a_scenario_finding_is_recorded_as_an_event(tmp_path: Path) -> None:
    import sqlite3

    from gpumix.demo.scenarios import start_scenario
    from gpumix.record.recorder import Recorder

    hub = quiet_hub()
    path = tmp_path / "rec.sqlite"
    recorder = Recorder(path).attach(hub)
    tick(hub)
    start_scenario(hub, "launch-bound")
    tick(hub)
    assert recorder.flush()
    events = sqlite3.connect(path).execute("SELECT kind, payload FROM events ORDER BY t, rowid").fetchall()
    appeared = [json.loads(p) for k, p in events if k == "finding_appeared"]
    (launch,) = [e for e in appeared if e["id"] == "launch-bound"]
    assert launch["gpus"] == [7] and "steps of 12.0 ms" in launch["evidence"]
    recorder.close()
