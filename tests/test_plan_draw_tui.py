"""The split dialog (`s`) shows the split's predicted draw against every budget the demo rig declares
(its 2800 W total, three supplies, two circuits: gpumix/rigs/mixed10.power.toml), warns in the theme's
warning colour before a budget is passed, and says when no budget is declared (issue 16, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.color import Color
from textual.widgets import Button, Static

from gpumix.cli.hardware import open_hardware
from gpumix.hub import Hub
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.tui.app import GpumixApp
from gpumix.tui.plan_screen import MAX_BUDGET_LINES, PlanScreen, draw_lines, draw_rows
from tests.conftest import ManualClock, ticked_hub
from tests.screen import screen_text, started
from tests.tui_world import COMPUTE_S, step_fields
from tests.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("tui_env")


def demo_job_hub(budget_w: float | None = 2800.0, layout: bool = True) -> Hub:
    """The demo's hardware (`gpumix-top --demo`: mixed-10 with its budget and supplies) on a manual
    clock, with tests/tui_world's ten-rank job; the budget and the layout as asked."""
    clock = ManualClock()
    hardware = open_hardware(demo=True, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    assert hardware.power_budget_w == 2800 and hardware.power_layout  # what the demo declares
    hardware.power_budget_w = budget_w
    hardware.power_layout = hardware.power_layout if layout else None
    hub = ticked_hub(hardware, clock, ticks=30)
    uuids = [gpu["uuid"] for gpu in hub.snapshot()["gpus"]]
    for rank, compute_s in enumerate(COMPUTE_S):
        key = hub.agent_hello(parse_hello({"rank": rank, "world_size": len(COMPUTE_S), "job": "train",
                                           "pid": 6000 + rank, "gpu_uuid": uuids[rank]}))
        for step in range(20):
            hub.agent_step(key, parse_step(step_fields(step, compute_s)))
    return hub


async def open_split(hub: Hub, size: tuple[int, int] = (80, 24)) -> tuple[GpumixApp, Any, PlanScreen]:
    app = GpumixApp(hub, interval_s=60)
    context = app.run_test(size=size)
    pilot = await context.__aenter__()
    await started(pilot, app)
    await pilot.press("s")
    screen = await wait_until_async(lambda: isinstance(app.screen, PlanScreen) and app.screen, 15.0,
                                    "the split dialog", pause=pilot.pause)
    await pilot.pause()
    return app, context, screen


def draw_statics(screen: PlanScreen) -> list[Static]:
    return list(screen.query_one("#plan-draw").query(Static))


def within(widget: Any, app: GpumixApp) -> bool:
    return widget.region.area > 0 and app.screen.region.contains_region(widget.region)


async def test_the_split_shows_its_draw_against_every_budget_of_the_demo_at_80x24() -> None:
    app, context, screen = await open_split(demo_job_hub())
    try:
        lines = [line for line, _ in draw_lines(screen.power)]
        total = screen.power["predicted_total_w"]
        assert lines[0] == f"draw {total:.0f}/2800 W total"  # under the budget: no warning
        assert [line.split(" W ")[1] for line in lines[1:]] == [
            "supply psu-main", "supply psu-3090", "supply psu-4090", "circuit wall-A", "circuit wall-B"]
        assert not any("⚠" in line for line in lines) and not screen.query(".-over")
        rows = [str(s.render()) for s in draw_statics(screen)]
        assert len(rows) == 3 and rows[0].startswith(lines[0] + "  ") and rows[0].endswith(lines[1])  # two a row
        text = screen_text(app)
        assert all(row in text for row in rows)  # drawn, not only composed
        assert "10 % headroom kept" in text  # the supplies' and circuits' limits are their usable watts
        assert all(within(b, app) for b in screen.query(Button)) and within(screen.query_one("#plan-result"), app)
        assert all(within(s, app) for s in draw_statics(screen))
    finally:
        await context.__aexit__(None, None, None)


async def test_a_budget_below_the_predicted_draw_warns_in_the_warning_colour() -> None:
    app, context, screen = await open_split(demo_job_hub(budget_w=1500.0))
    try:
        total = screen.power["predicted_total_w"]
        assert total > 1500
        over, *within_limits = draw_statics(screen)
        assert str(over.render()) == f"draw {total:.0f}/1500 W total  ⚠ over by {total - 1500:.0f} W"
        assert over.has_class("-over") and not any(row.has_class("-over") for row in within_limits)
        assert over.styles.color == Color.parse(app.get_css_variables()["warning"])  # the theme's $warning
        text = screen_text(app).splitlines()
        at = next(i for i, line in enumerate(text) if f"⚠ over by {total - 1500:.0f} W" in line)
        assert "draw" in text[at + 1] and "supply psu-main" in text[at + 1]  # the next row right below it
        assert within(over, app) and all(within(b, app) for b in screen.query(Button))
    finally:
        await context.__aexit__(None, None, None)


async def test_no_budget_declared_says_so() -> None:
    app, context, screen = await open_split(demo_job_hub(budget_w=None, layout=False))
    try:
        (line,) = draw_statics(screen)
        assert str(line.render()).endswith("no budget declared") and not line.has_class("-over")
        assert "no budget declared" in screen_text(app) and "⚠" not in screen_text(app)
    finally:
        await context.__aexit__(None, None, None)


def budget(name: str, predicted_w: float, usable_w: float, kind: str = "supply") -> dict[str, Any]:
    return {"kind": kind, "name": name, "limit_w": usable_w, "usable_w": usable_w, "predicted_w": predicted_w,
            "over": predicted_w > usable_w}


def test_many_budgets_show_those_passed_first_and_count_the_rest() -> None:
    budgets = [budget(f"psu-{i}", 100, 200) for i in range(20)] + [budget("[b]late[/b]", 300, 200)]
    lines = draw_lines({"budgets": budgets, "gpus": [{"index": 3, "at_cap": True}], "predicted_total_w": 2100,
                        "draw_now_total_w": 1900})
    assert len(lines) == MAX_BUDGET_LINES + 1
    assert lines[0] == ("draw 300/200 W supply [b]late[/b]  ⚠ over by 100 W", True)  # text, never markup
    assert lines[MAX_BUDGET_LINES - 1] == ("… 16 more budgets, within their limits", False)
    assert lines[-1] == ("⚠ GPU 3 would run at its cap: slower than predicted", True)
    rows = draw_rows(lines)
    assert rows[0] == lines[0] and rows[1][0] == f"{'draw 100/200 W supply psu-0':<37}draw 100/200 W supply psu-1"
    assert rows[2][0].endswith("psu-3") and rows[3] == lines[MAX_BUDGET_LINES - 1] and rows[-1] == lines[-1]
