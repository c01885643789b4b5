"""The findings panel (the advisor) and the tiers view."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gpumix.tui import format as fmt

SEVERITY_MARK = {"error": "✖ ERROR", "warning": "▲ WARN", "info": "• info"}


def findings_text(findings: list[dict[str, Any]]) -> Text:
    if not findings:
        return Text("No findings: the box looks healthy.")
    text = Text()
    for finding in findings:
        style = {"error": "bold red", "warning": "bold yellow"}.get(finding["severity"], "")
        text.append(f"{SEVERITY_MARK[finding['severity']]}  {finding['title']}\n", style=style)
        text.append(f"   evidence: {finding['evidence']}\n")
        text.append(f"   fix: {finding['fix']}\n\n")
    return text


def tiers_text(tiers: list[dict[str, Any]]) -> Text:
    text = Text()
    text.append(f"{'tier':<14}{'GPUs':>5}{'util':>6}{'power W':>9}{'samples/s':>11}{'waits':>7}  flag\n", style="bold")
    for tier in tiers:
        wait = fmt.pct(tier["wait_share"] * 100 if tier["wait_share"] is not None else None)
        rate = f"{tier['samples_per_s']:.0f}" if tier["samples_per_s"] is not None else fmt.NA
        util = fmt.pct(tier["util_mean_pct"])
        flag = tier["flag"] or ""
        text.append(f"{tier['tier']:<14}{tier['count']:>5}{util:>6}{tier['power_w']:>9.0f}{rate:>11}{wait:>7}  ")
        text.append(f"{flag}\n", style="bold")
    for tier in tiers:
        if tier["flag"]:
            text.append(f"\n{tier['tier']} is {tier['flag']}: {tier['evidence']}\n", style="bold")
            for option in tier["options"]:
                text.append(f"  · {option}\n")
    return text


class FindingsScreen(Screen[None]):
    BINDINGS = [Binding("escape,f", "app.pop_screen", "Back", id="findings.back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="findings-text")
        yield Footer()

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#findings-text", Static).update(findings_text(snapshot.get("findings", [])))


class TiersScreen(Screen[None]):
    BINDINGS = [Binding("escape,g", "app.pop_screen", "Back", id="tiers.back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="tiers-text")
        yield Footer()

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#tiers-text", Static).update(tiers_text(snapshot.get("tiers", [])))
