"""Dialogs that close once: a second Escape (or a button and a key together) before the first
close is done must not answer twice (Textual sets the result future again and the app dies)."""

from __future__ import annotations

from typing import TypeVar

from textual.await_complete import AwaitComplete
from textual.screen import ModalScreen

ResultType = TypeVar("ResultType")


class Dialog(ModalScreen[ResultType]):
    _answered = False

    def dismiss(self, result: ResultType | None = None) -> AwaitComplete:
        if self._answered or not self.is_current:
            return AwaitComplete.nothing()  # already answered, or not the screen in front
        self._answered = True
        return super().dismiss(result)

    def focus_if_there(self, selector: str) -> None:
        """Focus this widget, unless the dialog was closed before its Mount came: a fast Escape takes
        its children away first, and query_one would raise NoMatches (seen in the stress test)."""
        for widget in self.query(selector).results():
            widget.focus()
            return
