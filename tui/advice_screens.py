"""The findings panel (the advisor) and the tiers view."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpumix.tui import format as fmt
from gpumix.tui.snapshot_view import SnapshotView

SEVERITY_MARK = {"error": "✖ ERROR", "warning": "▲ WARN", "info": "• info"}


def findings_text(findings: list[dict[str, Any]]) -> Text:
    if not findings:
        return Text("No findings: the box looks healthy.")
    text = Text()
    for finding in findings:
        severity = finding["severity"]
        style = {"error": "bold red", "warning": "bold yellow"}.get(severity, "")
        mark = SEVERITY_MARK.get(severity, fmt.plain(severity))
        text.append(f"{mark}  {fmt.plain(finding['title'])}\n", style=style)
        text.append(f"   evidence: {fmt.plain(finding['evidence'], max_chars=2000)}\n")
        text.append(f"   fix: {fmt.plain(finding['fix'], max_chars=2000)}\n\n")
    return text


def tiers_text(tiers: list[dict[str, Any]]) -> Text:
    text = Text()
    text.append(f"{'tier':<14}{'GPUs':>5}{'util':>6}{'power W':>9}{'samples/s':>11}{'waits':>7}  flag\n", style="bold")
    for tier in tiers:
        name, flag = fmt.plain(tier["tier"]), fmt.plain(tier["flag"] or "")
        text.append(f"{name:<14}{fmt.plain(tier['count']):>5}{fmt.pct(tier['util_mean_pct']):>6}{fmt.watts(tier['power_w']):>9}"
                    f"{fmt.fixed(tier['samples_per_s']):>11}{fmt.share(tier['wait_share']):>7}  ")
        text.append(f"{flag}\n", style="bold")
    for tier in tiers:
        if tier["flag"]:
            text.append(f"\n{fmt.plain(tier['tier'])} is {fmt.plain(tier['flag'])}: {fmt.plain(tier['evidence'])}\n", style="bold")
            for option in tier["options"]:
                text.append(f"  · {fmt.plain(option)}\n")
    return text


class FindingsScreen(SnapshotView):
    BINDINGS = [Binding("escape,f", "app.pop_screen", "Back", id="findings.back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="findings-text")
        yield Footer(compact=True)  # compact: Cap, Budget and Split stay in view at 80 columns

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#findings-text", Static).update(findings_text(snapshot.get("findings", [])))


class TiersScreen(SnapshotView):
    BINDINGS = [Binding("escape,g", "app.pop_screen", "Back", id="tiers.back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="tiers-text")
        yield Footer(compact=True)  # compact: Cap, Budget and Split stay in view at 80 columns

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#tiers-text", Static).update(tiers_text(snapshot.get("tiers", [])))
