"""Re-plan the per-rank batch split: the current and proposed split side by side, with
predicted step time and samples/s; confirming restarts the job into it (gpumix run)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Static

from gpumix.model.step_model import basis_text
from gpumix.tui import format as fmt
from gpumix.tui.dialog import Dialog
from gpumix.tui.gpu_table import short_tier
from gpumix.tui.power_screens import DIALOG_CSS

LEGEND = "n_r: samples a step = m_r: micro-batch × k_r: accumulation steps"


def plan_table(plan: dict[str, Any], snapshot: dict[str, Any]) -> str:
    """The split rank by rank, then what the predictions stand on; job, tier and reason names
    are shown plain (see fmt.plain)."""
    ranks = {r["rank"]: r for r in snapshot.get("ranks", []) if r.get("job") == plan["job"]}
    tiers = {g["uuid"]: short_tier(g["tier"]) for g in snapshot["gpus"]}
    lines = [f"job {fmt.plain(plan['job'])}: global batch {fmt.plain(plan['global_batch'])} (kept)",
             f"{'rank':>4} {'GPU':<9} {'now':>5} → {'n_r':>4} {'m_r':>4} {'k_r':>3} {'weight':>6}  limited by",
             LEGEND]
    for share in plan["ranks"]:
        rank = ranks.get(share["rank"], {})
        limits = ", ".join(map(fmt.plain, share["limited_by"] or [])) or "-"
        lines.append(f"{fmt.plain(share['rank']):>4} {tiers.get(rank.get('gpu_uuid'), '?'):<9} {fmt.fixed(rank.get('samples') or 0):>5}"
                     f" → {fmt.plain(share['samples']):>4} {fmt.plain(share['micro_batch']):>4}"
                     f" {fmt.plain(share['accumulation_steps']):>3} {fmt.fixed(share['loss_weight'], 3):>6}  {limits}")
    basis = basis_lines(plan.get("basis"))
    return "\n".join(lines + ([""] + basis if basis else []))


def plan_result(plan: dict[str, Any]) -> str:
    """What the split buys, kept in view above the buttons: proposed against current, the ideal,
    and the alternatives the planner found."""
    proposed, current, ideal = plan["proposed"], plan["current"], plan["ideal"]
    speedup = f" · {fmt.fixed(plan['speedup'], 2)}× the current split" if plan.get("speedup") else ""
    lines = [f"proposed: {fmt.fixed(proposed['samples_per_s'])} samples/s, step {fmt.fixed(proposed['step_time_s'], 3)} s{speedup}",
             f" current: {fmt.fixed(current['samples_per_s'])} samples/s, step {fmt.fixed(current['step_time_s'], 3)} s"
             f" · ideal {fmt.fixed(ideal['samples_per_s'])} samples/s"]
    fast = plan.get("fast_tier_only")
    if fast:
        lines.append(f"      or: {fmt.plain(fast['tier'])} tier only, the rest for eval: {fmt.fixed(fast['samples_per_s'])} samples/s")
    without = plan.get("without_tier")
    if without:
        lines.append(f"      or: without the {fmt.plain(without['tier_left_out'])} tier: {fmt.fixed(without['samples_per_s'])} samples/s")
    if plan.get("note"):
        lines.append(f"    note: {fmt.plain(plan['note'], max_chars=200)}")
    return "\n".join(lines)


def basis_lines(basis: Any) -> list[str]:
    """What the predictions stand on: the ranks grouped by their compute basis, then the communication."""
    if not isinstance(basis, dict):
        return []
    groups: dict[str, list[str]] = {}
    for entry in basis.get("compute") or []:
        if isinstance(entry, dict):
            groups.setdefault(basis_text(entry), []).append(fmt.plain(entry.get("rank")))
    lines = [f"compute, ranks {', '.join(ranks)}: {fmt.plain(text)}" for text, ranks in groups.items()]
    if basis.get("communication") is not None:
        lines.append(f"communication: {fmt.plain(basis_text(basis['communication']))}")
    return lines


def leaving_out_is_faster(plan: dict[str, Any]) -> bool:
    without = plan.get("without_tier")
    if not without:
        return False
    left_out, proposed = fmt.number(without["samples_per_s"]), fmt.number(plan["proposed"]["samples_per_s"])
    return left_out is not None and (proposed is None or left_out > proposed)


class PlanScreen(Dialog[str | None]):
    """"split": restart the job into the plan; "without": into the best plan without one tier;
    None: nothing."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel", id="plan.cancel")]
    # At 80x24 the result and the buttons stay in view; the rank table scrolls between them.
    DEFAULT_CSS = DIALOG_CSS.format(name="PlanScreen") + """
    PlanScreen > Vertical { height: 22; }
    PlanScreen VerticalScroll { height: 1fr; }
    PlanScreen #plan-result { height: auto; max-height: 6; border-top: solid $primary; }
    """

    def __init__(self, plan: dict[str, Any], snapshot: dict[str, Any]) -> None:
        super().__init__()
        self.plan = plan
        self.snapshot = snapshot

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(Text(plan_table(self.plan, self.snapshot)), id="plan-text")
            yield Static(Text(plan_result(self.plan)), id="plan-result")
            with Horizontal():
                yield Button("Restart into this split…", id="apply", variant="warning")
                if leaving_out_is_faster(self.plan):
                    without = self.plan["without_tier"]
                    label = f"Without {short_tier(without['tier_left_out'])}: {fmt.fixed(without['samples_per_s'])}/s…"
                    yield Button(Text(label), id="apply-without", variant="warning")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#apply", Button).focus()  # Enter restarts into the split, after a confirmation

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"apply": "split", "apply-without": "without"}.get(event.button.id or ""))
