"""Colour snapshots (issue 12): every screen and dialog, in each shipped theme and under NO_COLOR, at
80x24 and 120x40, as SVG (`App.export_screenshot`) compared with tests/snapshots/svg/. A missing
snapshot fails; GPUMIX_UPDATE_SNAPSHOTS=1 writes them, on purpose (tests/screen.py).

The world is fixed: the simulated rig on a manual clock (its noise is seeded), a ten-rank job whose
steps are given, the host's readings fixed, UTC, and no poll after the first (interval 60 s), so the
title's clock is the snapshot's and two runs draw the same bytes. One app per theme and size visits
every screen: 4 x 2 apps, 11 screens each, 88 snapshots. The probe (`m`) has its own app per theme and
size: its confirmation, then its results from a recorded `gpumix probe --json` (two H200s) printed by a
stand-in process, since there is no CUDA here: 16 snapshots.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from textual.widgets import Footer, Input
from textual.widgets._footer import FooterKey

from gpumix.tui import probe_screen
from gpumix.tui.advice_screens import FindingsScreen, TiersScreen
from gpumix.tui.app import GpumixApp
from gpumix.tui.plan_screen import PlanScreen
from gpumix.tui.power_screens import FitScreen, PowerDialog
from gpumix.tui.probe_screen import ProbeConfirm, ProbeScreen
from gpumix.tui.ranks_screen import RanksScreen
from gpumix.tui.screens import GpuChartsScreen, HelpScreen, ProcessesScreen, TopologyScreen
from tests.screen import UPDATE_ENV, assert_matches_svg, started
from tests.test_probe_screen import H200_PAIR, fake_probe
from tests.tui_world import job_hub
from tests.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("tui_env")

THEMES = ("gpumix-dark", "gpumix-light", "gpumix-16", "NO_COLOR")  # NO_COLOR: the env var, its own theme
SIZES = ((80, 24), (120, 40))
# (name, key that opens it from the dashboard, the screen it opens)
SCREENS: tuple[tuple[str, str | None, type | None], ...] = (
    ("dashboard", None, None),
    ("charts", "enter", GpuChartsScreen),
    ("ranks", "r", RanksScreen),
    ("processes", "p", ProcessesScreen),
    ("topology", "t", TopologyScreen),
    ("findings", "f", FindingsScreen),
    ("tiers", "g", TiersScreen),
    ("cap", "c", PowerDialog),
    ("fit", "b", FitScreen),
    ("split", "s", PlanScreen),
    ("help", "question_mark", HelpScreen),
)


async def wait_for(pilot: Any, predicate: Any, what: str, timeout_s: float = 15.0) -> Any:
    return await wait_until_async(predicate, timeout_s, what, pause=pilot.pause)


def footers_drawn(app: GpumixApp) -> bool:
    """Every footer on screen (a dialog shows the dashboard's) holds its keys: a footer fills in
    after its screen is first drawn."""
    screens = [app.screen, *([app.main_screen] if app.screen is not app.main_screen else [])]
    return all(footer.query(FooterKey) for screen in screens for footer in screen.query(Footer))


async def settled_svg(pilot: Any, app: GpumixApp, repeats: int = 3) -> str:
    """The screenshot once the footers are drawn and `repeats` in a row, a pause apart, are the same
    (a screen draws its snapshot just after it mounts)."""
    await wait_for(pilot, lambda: footers_drawn(app), "the footer's keys")
    shots: list[str] = []

    def settled() -> str | None:
        shots.append(app.export_screenshot(simplify=True))
        return shots[-1] if len(shots) >= repeats and len(set(shots[-repeats:])) == 1 else None

    return await wait_until_async(settled, 15.0, "the screen to settle", pause=pilot.pause, poll_s=0.05)


def freeze(app: GpumixApp) -> None:
    """A blinking cursor is drawn on or off by the wall clock: kept on."""
    for field in app.screen.query(Input):
        field.cursor_blink = False


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
@pytest.mark.parametrize("theme", THEMES)
async def test_every_screen_and_dialog_in_colour(theme: str, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    if theme == "NO_COLOR":
        monkeypatch.setenv("NO_COLOR", "1")
    app = GpumixApp(job_hub(), interval_s=60, theme=None if theme == "NO_COLOR" else theme)
    problems = []
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        for name, key, kind in SCREENS:
            if key is not None:
                await pilot.press(key)
                await wait_for(pilot, lambda kind=kind: isinstance(app.screen, kind) and app.screen.is_mounted, f"{key} opens {name}")
            freeze(app)
            problem = assert_matches_svg(await settled_svg(pilot, app), f"{name}_{theme}_{size[0]}x{size[1]}")
            if problem:
                problems.append(problem)
            if key is not None:
                await pilot.press("escape")
                await wait_for(pilot, lambda: app.screen is app.main_screen, f"{name} closed")
    assert not problems, "\n".join(problems)


PROBE_PROGRESS = ("GPU 0: host<->device copies", "GPUs 0 and 1: peer copies", "gpumix probe: kept in /x/probe-1.json")


@pytest.mark.parametrize("size", SIZES, ids=lambda size: f"{size[0]}x{size[1]}")
@pytest.mark.parametrize("theme", THEMES)
async def test_the_probe_confirmation_and_results_in_colour(theme: str, size: tuple[int, int], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if theme == "NO_COLOR":
        monkeypatch.setenv("NO_COLOR", "1")
    # the recorded report, printed by a stand-in for `gpumix probe --json`; the monitor's own host named
    monkeypatch.setattr(probe_screen, "PROBE_COMMAND", fake_probe(tmp_path, H200_PAIR.read_text(), PROBE_PROGRESS))
    monkeypatch.setattr(probe_screen, "socket", SimpleNamespace(gethostname=lambda: "laptop"))
    app = GpumixApp(job_hub(), interval_s=60, theme=None if theme == "NO_COLOR" else theme)
    problems = []
    async with app.run_test(size=size) as pilot:
        await started(pilot, app)
        await pilot.press("m")
        await wait_for(pilot, lambda: isinstance(app.screen, ProbeConfirm) and app.screen.is_mounted, "m opens the probe's confirmation")
        problems.append(assert_matches_svg(await settled_svg(pilot, app), f"probe-confirm_{theme}_{size[0]}x{size[1]}"))
        await pilot.press("enter")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ProbeScreen) and app.screen, "the probe's screen")
        await wait_for(pilot, lambda: screen.report is not None, "the probe's results")
        problems.append(assert_matches_svg(await settled_svg(pilot, app), f"probe-results_{theme}_{size[0]}x{size[1]}"))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main_screen, "the probe closed")
    assert not any(problems), "\n".join(p for p in problems if p)


def test_a_missing_svg_fails_and_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    drawn = tmp_path / "drawn"
    problem = assert_matches_svg("<svg/>", "missing", folder=tmp_path, drawn=drawn)
    assert problem is not None and "no snapshot" in problem
    assert not (tmp_path / "missing.svg").exists()
    (tmp_path / "old.svg").write_text("<svg>old</svg>")
    assert "differs" in (assert_matches_svg("<svg>new</svg>", "old", folder=tmp_path, drawn=drawn) or "")
    assert (drawn / "old.svg").read_text() == "<svg>new</svg>"  # kept, to be looked at
    assert (tmp_path / "old.svg").read_text() == "<svg>old</svg>"
    monkeypatch.setenv(UPDATE_ENV, "1")
    assert assert_matches_svg("<svg>new</svg>", "old", folder=tmp_path, drawn=drawn) is None
    assert (tmp_path / "old.svg").read_text() == "<svg>new</svg>"
