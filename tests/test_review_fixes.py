"""Defects found in this session's review, each with the case that showed it: a plan number too large
for a float, a key after the app closed its screens, an agent that closed before the hub took its
connection over, a hub's finding text with control characters, a partial repaint inside a wide
character."""

from __future__ import annotations

import asyncio
import socket

import pytest
from rich.console import Console
from rich.segment import Segment
from textual import events
from textual._compositor import ChopsUpdate
from textual.strip import Strip

from gpumix.cli.doctor import hub_findings
from gpumix.hub import Hub
from gpumix.hub.agent_stream import serve_agent
from gpumix.power.split_draw import _number
from gpumix.tui import terminal_writes
from gpumix.tui.app import GpumixApp
from gpumix.tui.dialog import Dialog
from tests.screen import started
from tests.test_hub_batched_reads import Recorder


def test_a_number_too_large_for_a_float_is_no_number() -> None:
    assert _number(10**400) is None and _number(-1) is None and _number(float("nan")) is None
    assert _number(True) is None and _number(2) == 2.0


@pytest.mark.usefixtures("tui_env")
async def test_a_key_after_the_screens_are_gone_is_dropped(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        stack = app._screen_stacks[app._current_mode]
        app._screen_stacks[app._current_mode] = []  # as while the app closes
        try:
            await app.on_event(events.Key("escape", None))  # App.on_event read self.screen: ScreenStackError
        finally:
            app._screen_stacks[app._current_mode] = stack


def test_an_agent_that_closed_before_the_takeover_ends_at_once() -> None:
    async def serve() -> BaseException | None:
        ours, theirs = socket.socketpair()
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: asyncio.StreamReaderProtocol(reader), ours)
        theirs.close()  # the agent's hello was read; it died before its connection was handed over
        while not reader.at_eof():
            await asyncio.sleep(0.01)
        try:  # before: it waited for the 30 min idle timeout
            await asyncio.wait_for(serve_agent(reader, Recorder(), None, transport, 1800.0, lambda: 0.0), 10)
        except asyncio.IncompleteReadError as ended:
            return ended
        finally:
            transport.close()
        return None

    assert isinstance(asyncio.run(serve()), asyncio.IncompleteReadError)


def test_a_hubs_finding_text_is_shown_never_sent_to_the_terminal() -> None:
    finding = {"id": "x\x1b]0;owned\x07", "severity": "warning", "title": "GPU \x1b[2J gone",
               "evidence": "a\rb\x9b31m", "fix": "f" * 5000, "gpus": [0]}
    [shown] = hub_findings({"findings": [finding]})  # type: ignore[arg-type, typeddict-item]
    for text in (shown.id, shown.title, shown.evidence, shown.fix):
        assert text.isprintable(), text
    assert "\\x1b[2J" in shown.title and len(shown.fix) == 2000


def test_a_partial_write_never_starts_inside_a_wide_character() -> None:
    strip = Strip([Segment("ab漢字cd")])  # 漢 takes columns 2-3, 字 4-5
    update = ChopsUpdate([{0: strip}], [(0, 3, 5)], [[strip.cell_length]])
    written = terminal_writes.render_segments(update, Console(width=20, force_terminal=True, color_system=None))
    assert "漢" in written  # cropping at column 3 gave a blank for its right half, and its left half stayed stale


def test_a_dialog_closed_before_its_mount_focuses_nothing_and_does_not_crash() -> None:
    """A fast Escape takes a dialog's children away before its Mount: its on_mount asked query_one for
    the button and raised NoMatches, which stopped the app (the stress test, at 0-50 ms between keys)."""
    from gpumix.tui.plan_screen import PlanScreen
    from gpumix.tui.power_screens import FitScreen, PowerDialog

    for kind in (FitScreen, PowerDialog, PlanScreen):
        dialog = kind.__new__(kind)
        Dialog.__init__(dialog)  # no children: as after their removal
        dialog.on_mount()


@pytest.mark.usefixtures("tui_env")
async def test_enter_twice_opens_one_charts_screen(demo_hub: Hub) -> None:
    from gpumix.tui.screens import GpuChartsScreen

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        app.action_charts()
        await pilot.pause()
        app.action_charts()
        await pilot.pause()
        assert sum(isinstance(screen, GpuChartsScreen) for screen in app.screen_stack) == 1
