"""`gpumix-top --demo`: re-planning from the TUI restarts the demo job through the real
supervisor, the 3060 straggler goes away and samples/s rises."""

from __future__ import annotations

import os
from typing import Any

import pytest
from textual.widgets import Static

from gpumix.cli.hardware import open_hardware
from gpumix.cli.node import start_node
from gpumix.plan.inputs import plan_from_snapshot
from gpumix.plan.plan_json import plan_to_json
from gpumix.tui.app import GpumixApp
from gpumix.tui.plan_screen import PlanScreen, leaving_out_is_faster
from gpumix.tui.power_screens import ConfirmScreen
from tests.screen import screen_text
from tests.waiting import wait_until_async


def demo_ranks(hub: Any) -> list[dict[str, Any]]:
    return [r for r in (hub.snapshot() or {}).get("ranks", []) if r["job"] == "demo" and r["connected"]]


def at_step(hub: Any, step: int, ranks: int) -> bool:
    """`ranks` demo ranks report, all at `step` or beyond."""
    found = demo_ranks(hub)
    return len(found) == ranks and min(r["step"] or 0 for r in found) >= step


def offers_without(hub: Any) -> bool:
    """The split dialog would offer the job without a tier now (its button's own rule)."""
    _, plan = plan_from_snapshot(hub.snapshot(), "demo")
    return leaving_out_is_faster(plan_to_json(plan))


async def until(predicate, timeout_s: float, what: str = "the condition") -> Any:
    return await wait_until_async(predicate, timeout_s, what, poll_s=0.2)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_split_screen_restarts_the_demo_and_removes_the_straggler(tmp_path) -> None:
    node = start_node(open_hardware(demo=True), f"/tmp/gpumix-demo-test-{os.getpid()}.sock", interval_s=0.5, demo=True)
    try:
        app = GpumixApp(node.hub, interval_s=0.5)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(lambda: at_step(node.hub, 12, ranks=10), 90)
            await until(lambda: "straggler 0,1,2 (RTX 3060 12G)" in screen_text(app), 30, "the straggler on screen")
            before = node.hub.snapshot()["run"]
            await pilot.press("s")
            await until(lambda: isinstance(app.screen, PlanScreen), 10)
            text = str(app.screen.query_one("#plan-result", Static).render())
            assert "proposed:" in text and "× the current split" in text
            await pilot.click("#apply")
            await until(lambda: isinstance(app.screen, ConfirmScreen), 10, "the restart's confirmation")
            await pilot.press("y")
            supervisor = node.demo.supervisor
            await until(lambda: supervisor.restarts == 1, 60)
            await until(lambda: at_step(node.hub, supervisor.resume_step + 12, ranks=10), 60)
            await until(lambda: any("10 ranks" in line and "straggler" not in line for line in screen_text(app).splitlines()),
                        30, "the run line without a straggler")
            after = node.hub.snapshot()["run"]
            assert after["samples_per_s"] > 1.6 * before["samples_per_s"], (before, after)
            assert not any(r["straggler"] for r in demo_ranks(node.hub))
            run_line = next(line for line in screen_text(app).splitlines() if "10 ranks" in line)
            assert "straggler" not in run_line
            shares = {r["rank"]: r["samples"] for r in demo_ranks(node.hub)}
            assert max(shares[r] for r in (0, 1, 2)) < 40 < 90 < min(shares[r] for r in (7, 8, 9))
    finally:
        node.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_restart_without_the_3060_tier_runs_on_seven_gpus() -> None:
    hardware = open_hardware(demo=True)
    for index in range(3):
        # the 3060s held at their lowest cap (100 W, a PSU's budget): the job is then faster without them.
        # At stock caps the world's DDP overlap (ResNet-50's buckets) hides enough of their slow links
        # that the planner's split beats leaving them out, and the dialog rightly offers no such button.
        hardware.backend.set_power_limit_w(index, 100.0)
    node = start_node(hardware, f"/tmp/gpumix-demo-test7-{os.getpid()}.sock", interval_s=0.5, demo=True)
    try:
        app = GpumixApp(node.hub, interval_s=0.5)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(lambda: at_step(node.hub, 12, ranks=10), 90)
            await until(lambda: (run := node.hub.snapshot()["run"]) and run["ranks"] == 10 and run["stragglers"], 30,
                        "the run's stragglers")
            # the offer rests on measured step times, 2-5 % apart here: CI at 68250f9, its box busy beside it,
            # pressed `s` on a measurement that did not make it, so the test waits until the plan makes it; and
            # CI at 61c0160 saw the next measurement, which the dialog plans from, unmake it: then the dialog
            # is closed and opened again once the plan makes it (a few times at most)
            for _ in range(4):
                await until(lambda: offers_without(node.hub), 60, "the plan to offer the job without the 3060s")
                before = node.hub.snapshot()["run"]
                await pilot.press("s")
                await until(lambda: isinstance(app.screen, PlanScreen), 10)
                if app.screen.query("#apply-without"):
                    break
                await pilot.press("escape")
                await until(lambda: not isinstance(app.screen, PlanScreen), 10, "the dialog to close")
            await pilot.click("#apply-without")  # offered: the planner finds the job faster without the 3060s
            await until(lambda: isinstance(app.screen, ConfirmScreen), 10, "the restart's confirmation")
            await pilot.press("y")
            supervisor = node.demo.supervisor
            await until(lambda: supervisor.restarts == 1, 60)
            await until(lambda: at_step(node.hub, supervisor.resume_step + 12, ranks=7), 60)
            # the freed 3060s idle at the simulator's next tick
            await until(lambda: all((node.hub.snapshot()["gpus"][i]["util_gpu_pct"] or 0) < 5 for i in range(3)), 30,
                        "the 3060s to idle")
            snapshot = node.hub.snapshot()
            on_gpus = {gpu["index"] for gpu in snapshot["gpus"] if gpu["ranks"]}
            assert on_gpus == set(range(3, 10))
            assert all(snapshot["gpus"][i]["util_gpu_pct"] < 5 for i in range(3))  # the 3060s are free for eval
            assert snapshot["run"]["samples_per_s"] > 1.6 * before["samples_per_s"], (before, snapshot["run"])
    finally:
        node.stop()
