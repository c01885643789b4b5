"""Power-cap dialogs: set or reset caps of GPUs, fit caps to the budget. Each change
is confirmed first; a cancel changes nothing."""

from __future__ import annotations

import math
import textwrap
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from gpumix.model.step_model import basis_text
from gpumix.tui import format as fmt
from gpumix.tui.dialog import Dialog

DIALOG_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 76; height: auto; max-height: 22; border: round $primary; background: $surface; padding: 0 1; }}
{name} Horizontal {{ height: auto; }}
{name} Button {{ margin: 0 1 0 0; }}
{name} .error {{ color: $error; }}
"""


TEXT_WIDTH = 70  # a dialog's text: 76 columns less its border, padding and a scrollbar


class ConfirmScreen(Dialog[bool]):
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel", id="confirm.cancel"),
                Binding("y", "dismiss(True)", "Yes", id="confirm.yes")]
    DEFAULT_CSS = DIALOG_CSS.format(name="ConfirmScreen")

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question), id="question")
            with Horizontal():
                yield Button("Yes, apply", id="yes", variant="warning")
                yield Button("Cancel", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


def parse_watts(text: str, gpus: list[dict[str, Any]]) -> tuple[float | None, str]:
    """The cap typed, or None and why it cannot be taken (checked before anything is sent)."""
    try:
        watts = float(text.strip().removesuffix("W").removesuffix("w"))
    except ValueError:
        watts = math.nan
    if not math.isfinite(watts):  # repr shows controls escaped; the label never parses markup
        return None, f"not a number of watts: {text.strip()[:40]!r}"
    for gpu in gpus:
        low, high = fmt.number(gpu["power_limit_min_w"]), fmt.number(gpu["power_limit_max_w"])
        if low is None or high is None:
            return None, f"GPU {fmt.plain(gpu['index'])} does not report its allowed range"
        if not low <= watts <= high:
            return None, f"GPU {fmt.plain(gpu['index'])} ({fmt.plain(gpu['tier'])}) takes {fmt.watts(low)}–{fmt.watts(high)} W"
    return watts, ""


class PowerDialog(Dialog[dict[str, Any] | None]):
    """Returns a power request ({action, gpus, watts}) or None when cancelled."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="power.cancel")]
    DEFAULT_CSS = DIALOG_CSS.format(name="PowerDialog") + "PowerDialog VerticalScroll { height: auto; max-height: 12; }\n"

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        super().__init__()
        self.gpus = gpus

    def compose(self) -> ComposeResult:
        lines = [f"Power cap for {len(self.gpus)} GPU(s)", ""]
        for gpu in self.gpus:
            lines.append(  # one line in the dialog's 72 columns
                f" GPU {fmt.plain(gpu['index'])} {fmt.plain(gpu['tier']):<13} draw {fmt.watts(gpu['power_w']):>4} W · cap {fmt.watts(gpu['power_cap_w']):>4} W"
                f" · def {fmt.watts(gpu['power_limit_default_w'])} W · {fmt.watts(gpu['power_limit_min_w'])}–"
                f"{fmt.watts(gpu['power_limit_max_w'])} W"
            )
        with Vertical():
            with VerticalScroll(can_focus=False):  # many GPUs marked: their lines scroll, the field and buttons stay
                yield Static(Text("\n".join(lines)))
            yield Input(placeholder="new cap in watts", id="watts")
            yield Label("", id="problem", classes="error", markup=False)  # it quotes what was typed
            with Horizontal():
                yield Button("Apply…", id="apply", variant="primary")
                yield Button("Reset to default…", id="reset")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_if_there("Input")

    def on_input_changed(self, event: Input.Changed) -> None:
        _, problem = parse_watts(event.value, self.gpus) if event.value.strip() else (None, "")
        self.query_one("#problem", Label).update(problem)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self._apply()
        elif event.button.id == "reset":
            self.dismiss({"type": "power", "action": "reset", "gpus": [g["index"] for g in self.gpus]})
        else:
            self.dismiss(None)

    def _apply(self) -> None:
        watts, problem = parse_watts(self.query_one(Input).value, self.gpus)
        if watts is None:
            self.query_one("#problem", Label).update(problem)
            return
        self.dismiss({"type": "power", "action": "set", "gpus": [g["index"] for g in self.gpus], "watts": watts})


def basis_lines(gpus: list[dict[str, Any]]) -> list[str]:
    """The GPUs grouped by what their throughput-at-a-cap stands on (measured caps or the prior)."""
    groups: dict[str, list[str]] = {}
    for gpu in gpus:
        groups.setdefault(basis_text(gpu.get("basis")), []).append(fmt.plain(gpu.get("index")))
    return [f" GPU {', '.join(indices)}: {fmt.plain(text)}" for text, indices in groups.items()]


class FitScreen(Dialog[bool]):
    """Shows a fit-to-budget proposal and its reasons; True applies it."""

    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel", id="fit.cancel")]
    # A proposal for many GPUs is taller than the dialog: it scrolls, so the buttons stay in view.
    DEFAULT_CSS = DIALOG_CSS.format(name="FitScreen") + "FitScreen VerticalScroll { height: auto; max-height: 16; }\n"

    def __init__(self, proposal: dict[str, Any]) -> None:
        super().__init__()
        self.proposal = proposal

    def compose(self) -> ComposeResult:
        fit = self.proposal["fit"]
        lines = [fmt.plain(self.proposal["message"]), ""]
        for gpu in fit["gpus"]:  # a long reason goes on indented, not wrapped to the left edge
            line = (f" GPU {fmt.plain(gpu['index'])} {fmt.plain(gpu['tier']):<13} {fmt.watts(gpu['old_w']):>4}"
                    f" → {fmt.watts(gpu['new_w']):>4} W  {fmt.plain(gpu['reason'])}")
            lines += textwrap.wrap(line, TEXT_WIDTH, subsequent_indent=" " * 3, drop_whitespace=False) or [line]
        lines += ["", "throughput at a cap stands on:"]
        for line in basis_lines(fit["gpus"]):
            lines += textwrap.wrap(line, TEXT_WIDTH, subsequent_indent=" " * 3)
        with Vertical():
            with VerticalScroll():
                yield Static(Text("\n".join(lines)), id="fit-text")
            with Horizontal():
                yield Button("Apply these caps", id="apply", variant="warning")  # this dialog is the confirmation
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_if_there("#apply")  # Enter applies, not the scroll

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "apply")
