"""A TextPanel whose new text changes a few columns renders only those lines again (issue 13: a
digit of the clock or a reading re-rendered the whole 35-line detail panel), and what it renders
is what rendering the whole text gives: with padding and a border, after a theme change, after a
line count change."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.strip import Strip
from textual.widget import Widget

from gpumix.tui.text_panel import TextPanel

LINES = ["gpu 0 · RTX 4090 · 12:00:01", " util ▁▂▃ 10%  power 71 W", " rx 1.2G/s tx 0.3G/s", " procs: none"]


class PanelApp(App[None]):
    CSS = "TextPanel { padding: 0 1; height: 8; border-top: solid $primary; color: $secondary; text-style: bold; }"

    def compose(self) -> ComposeResult:
        yield TextPanel("\n".join(LINES), id="panel")


def whole_render(panel: TextPanel) -> list[Strip]:
    """The lines as Textual renders the panel's whole text."""
    Widget._render_content(panel)
    return list(panel._render_cache.lines)


async def test_a_changed_digit_renders_its_line_only_and_as_the_whole_text_would() -> None:
    app = PanelApp()
    async with app.run_test(size=(50, 12)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        changed = [LINES[0].replace(":01", ":02"), LINES[1].replace("71", "73"), *LINES[2:]]
        panel.show("\n".join(changed))
        await pilot.pause()
        assert panel.lines_rendered == 2  # the clock's line and the power's, not the panel's 8
        assert "12:00:02" in panel._render_cache.lines[0].text
        assert panel._render_cache.lines == whole_render(panel)


async def test_a_theme_change_with_a_line_pending_renders_everything() -> None:
    app = PanelApp()
    async with app.run_test(size=(50, 12)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        panel.show("\n".join([LINES[0].replace(":01", ":03"), *LINES[1:]]))
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        assert panel._render_cache.lines == whole_render(panel)
        panel.show("\n".join([*LINES, " one line more"]))  # a relayout: the whole text
        await pilot.pause()
        assert panel._render_cache.lines == whole_render(panel)
        assert "one line more" in panel._render_cache.lines[4].text
