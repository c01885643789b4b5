"""Rich styles derived from the current Textual theme, for cells that flag something."""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from textual.color import Color
from textual.theme import Theme


@dataclass(frozen=True)
class Palette:
    warning: Style
    error: Style
    success: Style
    muted: Style

    @classmethod
    def from_theme(cls, theme: Theme) -> Palette:
        def style(color: str | None, **kwargs: bool) -> Style:
            return Style(color=Color.parse(color).rich_color if color else None, **kwargs)

        return cls(
            warning=style(theme.warning, bold=True),
            error=style(theme.error, bold=True),
            success=style(theme.success),
            muted=Style(dim=True),
        )
