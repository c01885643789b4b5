"""Re-plan the per-rank batch split: the current and proposed split side by side, with
predicted step time and samples/s, and the split's predicted draw against every budget the machine
declares (gpumix.power.split_draw); confirming restarts the job into it (gpumix run)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Static

from gpumix.model.step_model import basis_text
from gpumix.power.split_draw import draw_against_budgets
from gpumix.tui import format as fmt
from gpumix.tui.dialog import Dialog
from gpumix.tui.gpu_table import short_tier
from gpumix.tui.power_screens import DIALOG_CSS

LEGEND = "n_r: samples a step = m_r: micro-batch × k_r: accumulation steps"
MAX_BUDGET_LINES = 6  # a layout may declare many supplies: the ones over their limit come first
NAME_CHARS = 20  # a supply's or circuit's name, from the user's power config
HALF_CHARS = 35  # a line this short shares its row with the next (the dialog's text is 72 wide)


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


def draw_lines(power: dict[str, Any]) -> list[tuple[str, bool]]:
    """The split's predicted draw, one line per budget (those it would pass first), each with whether
    it warns; no budget declared says so in one line."""
    budgets = sorted(power.get("budgets") or [], key=lambda b: not b["over"])  # stable: the layout's order
    if not budgets:
        lines = [(f"draw {power['predicted_total_w']:.0f} W predicted (now {power['draw_now_total_w']:.0f} W),"
                  " no budget declared", False)]
    else:
        shown = budgets if len(budgets) <= MAX_BUDGET_LINES else budgets[:MAX_BUDGET_LINES - 1]
        lines = [(budget_line(b), bool(b["over"])) for b in shown]
        if len(shown) < len(budgets):
            hidden = budgets[len(shown):]
            over = sum(1 for b in hidden if b["over"])
            lines.append((f"… {len(hidden)} more budgets" + (f", {over} of them over" if over else ", within their limits"),
                          over > 0))
    capped = [fmt.plain(g["index"]) for g in power.get("gpus") or [] if g.get("at_cap")]
    if capped:
        lines.append((f"⚠ GPU {','.join(capped[:16])} would run at {'its' if len(capped) == 1 else 'their'} cap:"
                      " slower than predicted", True))
    return lines


def draw_rows(lines: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Two short lines within their limits share a row, so the rank table keeps its rows at 80x24;
    a warning keeps a row of its own."""
    rows: list[tuple[str, bool]] = []
    room = False  # the last row holds one short line and has room for another
    for line, over in lines:
        short = not over and len(line) <= HALF_CHARS
        if short and room:
            rows[-1] = (f"{rows[-1][0]:<{HALF_CHARS + 2}}{line}", False)
            room = False
        else:
            rows.append((line, over))
            room = short
    return rows


def budget_line(budget: dict[str, Any]) -> str:
    """E.g. "draw 2899/2800 W total  ⚠ over by 99 W": predicted against the usable limit (headroom off)."""
    label = "total" if budget["kind"] == "total" else f"{fmt.plain(budget['kind'], 10)} {fmt.plain(budget['name'], NAME_CHARS)}"
    line = f"draw {budget['predicted_w']:.0f}/{budget['usable_w']:.0f} W {label}"
    return line + (f"  ⚠ over by {budget['predicted_w'] - budget['usable_w']:.0f} W" if budget["over"] else "")


def draw_title(power: dict[str, Any]) -> str:
    """The draw block's border title: what the limits are (a layout keeps headroom for transients)."""
    free = [1 - b["usable_w"] / b["limit_w"] for b in power.get("budgets") or [] if b["limit_w"] and b["usable_w"] < b["limit_w"]]
    return "predicted draw" + (f" (supplies, circuits: {100 * max(free):.0f} % headroom kept)" if free else "")


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
    PlanScreen #plan-draw { height: auto; border-top: solid $primary; border-title-color: $text-muted; }
    PlanScreen #plan-draw .-over { color: $warning; text-style: bold; }
    """

    def __init__(self, plan: dict[str, Any], snapshot: dict[str, Any]) -> None:
        super().__init__()
        self.plan = plan
        self.snapshot = snapshot
        self.power = draw_against_budgets(snapshot, plan)  # the split at the caps in force

    def compose(self) -> ComposeResult:
        with Vertical():
            with VerticalScroll():
                yield Static(Text(plan_table(self.plan, self.snapshot)), id="plan-text")
            yield Static(Text(plan_result(self.plan)), id="plan-result")
            with Vertical(id="plan-draw") as draw:
                draw.border_title = Text(draw_title(self.power))
                for line, over in draw_rows(draw_lines(self.power)):
                    yield Static(Text(line), classes="-over" if over else "")
            with Horizontal():
                yield Button("Restart into this split…", id="apply", variant="warning")
                if leaving_out_is_faster(self.plan):
                    without = self.plan["without_tier"]
                    label = f"Without {short_tier(without['tier_left_out'])}: {fmt.fixed(without['samples_per_s'])}/s…"
                    yield Button(Text(label), id="apply-without", variant="warning")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_if_there("#apply")  # Enter restarts into the split, after a confirmation

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"apply": "split", "apply-without": "without"}.get(event.button.id or ""))
