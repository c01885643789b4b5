"""The ranks view: every training rank, its GPU, pace, shares of the step and loss."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gpumix.tui import format as fmt
from gpumix.tui.gpu_table import short_tier
from gpumix.tui.panels import run_line

COLUMNS = (("rank", "Rank"), ("gpu", "GPU"), ("step", "Step"), ("step_time", "Step s"), ("compute", "Compute s"),
           ("samples", "Samples/s"), ("comm", "Comm%"), ("wait", "Wait%"), ("peak", "Peak mem"),
           ("cpu", "CPU%"), ("loss", "Loss"), ("trend", "Loss trend"))


def rank_row(rank: dict[str, Any], gpus: dict[str, dict[str, Any]]) -> tuple[str | Text, ...]:
    gpu = gpus.get(rank["gpu_uuid"] or "")
    where = f"{gpu['index']} {short_tier(gpu['tier'])}" if gpu else (rank["gpu_uuid"] or fmt.NA)[:12]
    def seconds(value: float | None) -> str:
        return f"{value:.3f}" if value is not None else fmt.NA
    def share(value: float | None) -> str:
        return fmt.pct(value * 100 if value is not None else None)
    label = f"{rank['rank']}{' straggler' if rank['straggler'] else ''}{'' if rank['connected'] else ' (gone)'}"
    return (
        Text(label, style="bold" if rank["straggler"] else ""), where,
        str(rank["step"]) if rank["step"] is not None else fmt.NA, seconds(rank["step_time_s"]), seconds(rank["compute_s"]),
        f"{rank['samples_per_s']:.0f}" if rank["samples_per_s"] is not None else fmt.NA,
        share(rank["comm_share"]), share(rank["data_wait_share"]),
        fmt.gib(rank["mem_peak_bytes"]) + "G" if rank["mem_peak_bytes"] is not None else fmt.NA,
        fmt.pct(rank["cpu_pct"]), f"{rank['loss']:.4f}" if rank["loss"] is not None else fmt.NA,
        fmt.spark(rank["loss_history"], 16, relative=True),
    )


class RanksScreen(Screen[None]):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "Back", id="ranks.back")]

    def compose(self) -> ComposeResult:
        yield Static(id="ranks-run")
        yield DataTable(id="ranks", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)

    def show(self, snapshot: dict[str, Any]) -> None:
        self.query_one("#ranks-run", Static).update(run_line(snapshot))
        table = self.query_one(DataTable)
        gpus = {gpu["uuid"]: gpu for gpu in snapshot["gpus"]}
        wanted = {f"{rank['job']}:{rank['rank']}": rank for rank in snapshot["ranks"]}
        for key in [row.value for row in table.rows if row.value not in wanted]:
            table.remove_row(key)
        for key, rank in wanted.items():
            cells = rank_row(rank, gpus)
            if key not in table.rows:
                table.add_row(*cells, key=key)
                continue
            for (column, _), value in zip(COLUMNS, cells, strict=True):
                if str(table.get_cell(key, column)) != str(value):
                    table.update_cell(key, column, value)
