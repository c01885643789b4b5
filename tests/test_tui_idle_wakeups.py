"""The dashboard's work when nothing but numbers change (issue 13, idle CPU): a line that wraps (the
run line at 80 columns) takes a new step time without laying the screen out again, and what it draws
is what drawing the whole text gives; the staleness watch wakes about once a snapshot, not twice a
second, and still notices a hub that stops answering."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from gpumix.hub import Hub
from gpumix.tui import app as app_module
from gpumix.tui.app import GpumixApp
from gpumix.tui.text_panel import TextPanel
from tests.test_tui_text_panel_lines import whole_render

pytestmark = pytest.mark.usefixtures("tui_env")

RUN = " 10 ranks · step 0.401s · 1599 samples/s · straggler 0,1,2 (RTX 3060 12G) · 39 % of Σ GPUs"


class WrapApp(App[None]):
    CSS = "TextPanel { height: auto; padding: 0 1; color: $secondary; }"

    def compose(self) -> ComposeResult:
        yield TextPanel(RUN, id="run")


async def test_a_wrapped_line_that_keeps_its_rows_repaints_without_a_relayout() -> None:
    app = WrapApp()
    async with app.run_test(size=(60, 10)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        assert panel.content_size.height == 2  # the line wraps at 58 columns
        panel.show(RUN.replace("0.401", "0.398").replace("1599", "1611"))
        await pilot.pause()
        assert panel.relayouts == 0
        assert panel._render_cache.lines == whole_render(panel)
        assert "0.398" in panel._render_cache.lines[0].text
        panel.show(RUN + " (equal 39 %, fast tier 43 %), one more row of text")  # a third row
        await pilot.pause()
        assert panel.relayouts == 1
        assert panel.content_size.height == 3
        assert panel._render_cache.lines == whole_render(panel)


class CountingApp(GpumixApp):
    """The dashboard, counting how often the staleness check runs."""

    CSS_PATH = str(Path(app_module.__file__).with_name("app.tcss"))  # beside the app, not this file
    checks = 0

    def _check_stale(self) -> None:
        self.checks += 1
        super()._check_stale()


class FrozenHub:
    """A hub that answers until `frozen`, then has nothing new (as a client whose hub stopped);
    each answer a new snapshot (a copy), as a live hub's are."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.frozen = False

    def snapshot(self) -> dict[str, Any] | None:
        return None if self.frozen else dict(self.hub.snapshot())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hub, name)


async def until(predicate: Any, deadline_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(120)
async def test_the_staleness_watch_wakes_about_once_a_snapshot(demo_hub: Hub) -> None:
    source = FrozenHub(demo_hub)
    app = CountingApp(source, interval_s=1)  # stale after 2 s; the old watch looked every 0.5 s
    async with app.run_test(size=(80, 24)):
        await until(lambda: app.renders >= 1)
        first_checks, first_renders = app.checks, app.renders
        await until(lambda: app.renders >= first_renders + 5)
        # fresh all along: each check comes when the newest snapshot would turn stale (1-2 s
        # after it), so at most one a snapshot and one more; twice a second was about two a snapshot
        assert app.checks - first_checks <= app.renders - first_renders + 1
        assert not app.stale
        source.frozen = True
        await until(lambda: app.stale)
        assert "hub lost" in app.query_one("#title", TextPanel).text
