"""Below the smallest size the monitor is laid out for, one clear notice instead of clipped controls."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Static

MIN_WIDTH = 80  # every screen and dialog is laid out to fit 80x24 (an SSH session's default)
MIN_HEIGHT = 24


def too_small(width: int, height: int) -> bool:
    return width < MIN_WIDTH or height < MIN_HEIGHT


def notice_text(width: int, height: int) -> str:
    return f"terminal too small (need {MIN_WIDTH}x{MIN_HEIGHT}, have {width}x{height})\nq quits"


class TooSmallScreen(Screen[None]):
    """Covers everything while the terminal is too small; the app pops it once the terminal grows."""

    DEFAULT_CSS = """
    TooSmallScreen { align: center middle; }
    TooSmallScreen > Static { width: auto; height: auto; text-style: bold; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="too-small")

    def on_mount(self) -> None:
        self.show_size(*getattr(self.app, "terminal_size", self.app.size))

    def show_size(self, width: int, height: int) -> None:
        if self.is_mounted:
            self.query_one("#too-small", Static).update(Text(notice_text(width, height), justify="center"))


class SizeWatch:
    """A mixin of the App (gpumix.tui.app): the notice pushed while the terminal is too small, popped
    (and the dashboard redrawn) once it grows. Needs from the App: size, screen, screen_stack,
    push_screen, pop_screen, _refresh_now; on_resize sets `_terminal_size`."""

    size: Size
    screen: Any
    screen_stack: list[Any]
    _terminal_size: Size | None = None

    @property
    def terminal_size(self) -> Size:
        return self._terminal_size or self.size

    @property
    def too_small(self) -> bool:
        return too_small(*self.terminal_size)

    def _check_size(self) -> None:
        if not self.screen_stack:
            return
        notice = self.screen if isinstance(self.screen, TooSmallScreen) else None
        if self.too_small and notice is None:
            self.push_screen(TooSmallScreen())  # type: ignore[attr-defined]
        elif self.too_small and notice is not None:
            notice.show_size(*self.terminal_size)
        elif notice is not None:
            self.pop_screen()  # type: ignore[attr-defined]
            self._refresh_now()  # type: ignore[attr-defined]
