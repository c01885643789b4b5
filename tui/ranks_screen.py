"""The ranks view: every training rank, its GPU, pace, shares of the step and loss."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from gpumix.tui import format as fmt
from gpumix.tui.gpu_table import WIDE_MIN_WIDTH, short_tier
from gpumix.tui.keyed_table import KeyedTable
from gpumix.tui.panels import run_line
from gpumix.tui.snapshot_view import SnapshotView
from gpumix.tui.text_panel import TextPanel

# What people read first comes first, short enough that at 80 columns it needs no scrolling
# (issue 12: Peak mem, CPU %, Loss and its trend were behind a horizontal scroll); the rest follows.
COLUMNS = (("rank", "Rank"), ("gpu", "GPU"), ("step_time", "Step s"), ("samples", "Smp/s"), ("comm", "Comm%"),
           ("wait", "Wait%"), ("peak", "Peak"), ("cpu", "CPU%"), ("loss", "Loss"), ("trend", "Trend"),
           ("step", "Step"), ("compute", "Compute s"), ("amp", "AMP"), ("scale", "Loss scale"), ("skipped", "Skipped"))
LEGEND = " rank! straggler · (gone) left the job · Peak: memory · more columns →"
NARROW_TREND = 8  # the loss trend's width below WIDE_MIN_WIDTH; wider terminals get WIDE_TREND
WIDE_TREND = 16
AMP_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
             "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


def amp_cells(rank: dict[str, Any]) -> tuple[str, str, str]:
    """Autocast's dtype ("fp32": off), the GradScaler's scale and its skipped steps (share of the
    steps kept), N/A where the agent reports none (watch_amp not called)."""
    autocast, dtype = rank.get("amp_autocast"), rank.get("amp_dtype")
    named = AMP_SHORT.get(dtype, "on") if isinstance(dtype, str) else "on"
    amp = fmt.NA if autocast is None else "fp32" if autocast == 0 else named
    skipped = fmt.fixed(rank.get("amp_skipped_steps"))
    if skipped != fmt.NA and fmt.number(rank.get("amp_skipped_share")) is not None:
        skipped += f" ({fmt.share(rank['amp_skipped_share'])})"
    scale = fmt.number(rank.get("loss_scale"))
    return amp, fmt.NA if scale is None else f"{scale:.6g}", skipped


def rank_row(rank: dict[str, Any], gpus: dict[str, dict[str, Any]], trend_width: int = NARROW_TREND) -> tuple[Text, ...]:
    """The cells of one rank in COLUMNS' order, as plain Text: a rank's fields are data, never markup."""
    gpu = gpus.get(rank["gpu_uuid"] or "")
    where = f"{fmt.plain(gpu['index'])} {short_tier(gpu['tier'])}"[:14] if gpu else fmt.plain(rank["gpu_uuid"] or None)[:12]
    label = f"{fmt.plain(rank['rank'])}{'!' if rank['straggler'] else ''}{'' if rank['connected'] else ' (gone)'}"
    peak = fmt.gib(rank["mem_peak_bytes"])
    cells = (
        where, fmt.fixed(rank["step_time_s"], 3), fmt.fixed(rank["samples_per_s"]), fmt.share(rank["comm_share"]),
        fmt.share(rank["data_wait_share"]), peak if peak == fmt.NA else peak + "G", fmt.pct(rank["cpu_pct"]),
        fmt.fixed(rank["loss"], 4), fmt.spark(rank["loss_history"], trend_width, relative=True),
        fmt.plain(rank["step"]), fmt.fixed(rank["compute_s"], 3), *amp_cells(rank),
    )
    return (Text(label, style="bold" if rank["straggler"] else ""), *(Text(cell) for cell in cells))


class RanksScreen(SnapshotView):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "Back", id="ranks.back")]

    def compose(self) -> ComposeResult:
        yield TextPanel(id="ranks-run")
        yield Static(Text(LEGEND), id="ranks-legend")
        yield KeyedTable(id="ranks", cursor_type="row")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one(KeyedTable)
        for key, label in COLUMNS:
            table.add_column(Text(label), key=key)  # a str is markup: rich would load its emoji table

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#ranks-run", TextPanel).show(run_line(snapshot))
        gpus = {gpu["uuid"]: gpu for gpu in snapshot["gpus"]}
        trend_width = WIDE_TREND if getattr(self.app, "terminal_size", self.app.size).width >= WIDE_MIN_WIDTH else NARROW_TREND
        keys = [key for key, _ in COLUMNS]
        self.query_one(KeyedTable).sync({f"{rank['job']}:{rank['rank']}": dict(zip(keys, rank_row(rank, gpus, trend_width), strict=True))
                                         for rank in snapshot["ranks"]})
