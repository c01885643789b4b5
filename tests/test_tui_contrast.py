"""No text painted in its own background colour: every shipped theme, and NO_COLOR (issue 12,
item 2: NO_COLOR=1 drew every cell black on black)."""

from __future__ import annotations

import pytest
from rich.color import Color

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from tests.screen import started

pytestmark = pytest.mark.usefixtures("tui_env")

SHIPPED = ("gpumix-dark", "gpumix-light", "gpumix-16")


def unreadable_cells(app: GpumixApp) -> list[str]:
    """Visible text whose foreground is its background, as the terminal would be sent it (filters applied)."""
    bad = []
    for y, strip in enumerate(app.screen._compositor.render_strips()):
        for segment in strip:
            style = segment.style
            if style is None or not segment.text.strip() or style.reverse:
                continue
            fg, bg = style.color, style.bgcolor
            if fg is None or bg is None or fg.is_default or bg.is_default:
                continue
            if fg.get_truecolor() == bg.get_truecolor():
                bad.append(f"row {y}: {segment.text!r} {fg} on {bg}")
    return bad


@pytest.mark.parametrize("theme", SHIPPED)
async def test_no_theme_paints_text_in_its_background(demo_hub: Hub, theme: str) -> None:
    app = GpumixApp(demo_hub, interval_s=60, theme=theme)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert unreadable_cells(app) == []


async def test_no_color_is_readable(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLORTERM", "truecolor")
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert app.theme == "gpumix-16"
        assert unreadable_cells(app) == []
        # no colour at all: what the terminal shows is its own foreground on its own background
        colours = {str(s.style.color) for strip in app.screen._compositor.render_strips() for s in strip
                   if s.style is not None and s.text.strip() and s.style.color is not None}
        assert colours <= {str(Color.default())}, colours
