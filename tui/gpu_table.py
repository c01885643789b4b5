"""The GPU table: one row per GPU, cells rewritten only when their text changed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from gpumix.tui import format as fmt
from gpumix.tui.palette import Palette

# (key, label, width): fixed widths keep columns still, so a tick rewrites only changed cells.
HARDWARE_COLUMNS = (
    ("index", "#", 3),
    ("tier", "GPU", 9),
    ("util", "Util", 4),
    ("mem", "Mem", 8),
    ("power", "Power", 9),
    ("temp", "Temp", 4),
    ("throttle", "Thr", 4),
    ("link", "PCIe link", 10),
    ("rx", "RX/s", 5),
    ("tx", "TX/s", 5),
    ("link_share", "Lnk%", 4),
)
# The training view: the rank(s) on each GPU, beside its utilization.
TRAINING_COLUMNS = (
    ("index", "#", 3),
    ("tier", "GPU", 9),
    ("util", "Util", 4),
    ("rank", "Rank", 5),
    ("step", "Step", 6),
    ("step_time", "Step s", 6),
    ("samples", "Smp/s", 6),
    ("comm", "Comm%", 5),
    ("wait", "Wait%", 5),
    ("peak", "Peak", 5),
    ("loss", "Loss", 12),
)
VIEWS = {"hardware": HARDWARE_COLUMNS, "training": TRAINING_COLUMNS}
COLUMNS = HARDWARE_COLUMNS
THROTTLE_SHORT = {"power cap": "pwr", "SW thermal": "thm", "HW thermal": "thm", "HW slowdown": "hw", "power brake": "brk", "idle": "idle"}


def short_tier(tier: str) -> str:
    """'RTX 3090 24G' -> '3090 24G': the table is 80 columns wide. Safe to show (see fmt.plain)."""
    return fmt.plain(tier).removeprefix("RTX ").removeprefix("GeForce ")


def node_tier(gpu: dict[str, Any]) -> str:
    """The GPU column; with several nodes attached, 'node:model' (e.g. 'n2:3090') to stay 9 wide."""
    label = gpu.get("node_label")
    if not label:
        return short_tier(gpu["tier"])
    model = short_tier(gpu["tier"]).split(" ")[0]
    return f"{fmt.plain(label)}:{model}"[:9]


def throttle_label(reasons: list[str] | None) -> str:
    if reasons is None:
        return fmt.NA
    for reason in ("HW slowdown", "power brake", "HW thermal", "SW thermal", "power cap", "idle"):
        if reason in reasons:
            return THROTTLE_SHORT[reason]
    return "-"


def link_label(gpu: dict[str, Any]) -> str:
    now = fmt.link(gpu["pcie_link_gen_current"], gpu["pcie_link_width_current"])
    top = fmt.link(gpu["pcie_gen_max"], gpu["pcie_width_max"])
    flag = "!" if gpu["pcie_link_below_max_under_load"] else ""
    return f"{now}/{top}{flag}"


def training_cells(gpu: dict[str, Any], ranks: dict[int, dict[str, Any]], palette: Palette) -> dict[str, tuple[str, Any]]:
    """The first rank on this GPU: its step, speed, shares of the step and loss."""
    on_gpu = [ranks[r] for r in gpu.get("ranks", []) if r in ranks]
    if not on_gpu:
        return {key: ("", None) for key, _, _ in TRAINING_COLUMNS[3:]}
    rank = on_gpu[0]
    flag = palette.error if rank["straggler"] else None
    label = f"{fmt.plain(rank['rank'])}{'!' if rank['straggler'] else ''}{'+' if len(on_gpu) > 1 else ''}"
    comm, wait = fmt.number(rank["comm_share"]) or 0, fmt.number(rank["data_wait_share"]) or 0
    return {
        "rank": (label, flag),
        "step": (fmt.plain(rank["step"]), None),
        "step_time": (fmt.fixed(rank["step_time_s"], 3), flag),
        "samples": (fmt.fixed(rank["samples_per_s"]), None),
        "comm": (fmt.share(rank["comm_share"]), palette.warning if comm >= 0.5 else None),
        "wait": (fmt.share(rank["data_wait_share"]), palette.warning if wait >= 0.2 else None),
        "peak": (fmt.gib(rank["mem_peak_bytes"]) + "G" if fmt.number(rank["mem_peak_bytes"]) is not None else fmt.NA, None),
        "loss": (fmt.spark(rank["loss_history"], 12, relative=True), None),
    }


def row_cells(gpu: dict[str, Any], palette: Palette, ranks: dict[int, dict[str, Any]] | None = None,
              columns: tuple[tuple[str, str, int], ...] = HARDWARE_COLUMNS, marked: bool = False) -> dict[str, Text]:
    """The text of each cell of one GPU's row, styled where it flags something."""
    index = f"*{fmt.plain(gpu['index'])}" if marked else fmt.plain(gpu["index"])
    cells: dict[str, tuple[str, Any]] = {"index": (index, palette.warning if marked else None),
                                         "tier": (node_tier(gpu), None)}
    if gpu["lost"]:
        cells["util"] = ("LOST", palette.error)
        for key, _, _ in columns[3:]:
            cells[key] = ("", None)
    else:
        util = fmt.number(gpu["util_gpu_pct"])
        shares = (fmt.number(gpu["pcie_rx_link_share"]), fmt.number(gpu["pcie_tx_link_share"]))
        share = max((s for s in shares if s is not None), default=None)
        throttle = throttle_label(gpu["clock_event_reasons"])
        cells.update(
            util=(fmt.pct(util), palette.warning if util is not None and util < 50 else None),
            mem=(fmt.mem_used_total(gpu["mem_used_bytes"], gpu["mem_total_bytes"]), None),
            power=(fmt.power_draw_cap(gpu["power_w"], gpu["power_cap_w"]), None),
            temp=(fmt.celsius(gpu["temperature_c"]), palette.warning if (fmt.number(gpu["temperature_c"]) or 0) >= 83 else None),
            throttle=(throttle, palette.warning if throttle in ("thm", "hw", "brk") else None),
            link=(link_label(gpu), palette.warning if gpu["pcie_link_below_max_under_load"] else None),
            rx=(fmt.rate(gpu["pcie_rx_bytes_per_s"]), None),
            tx=(fmt.rate(gpu["pcie_tx_bytes_per_s"]), None),
            link_share=(fmt.share(share), palette.warning if (share or 0) >= 0.8 else None),
        )
        if columns is TRAINING_COLUMNS:
            cells.update(training_cells(gpu, ranks or {}, palette))
    widths = {key: width for key, _, width in columns}
    return {key: Text(f" {text:>{widths[key]}}", style=style or "") for key, (text, style) in cells.items() if key in widths}


class GpuTable(DataTable):
    """Rows keyed by GPU UUID, columns by name: `update_cell` touches only what changed."""

    BINDINGS = [Binding("enter", "select_cursor", "Charts", show=False, id="gpus.charts")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", cell_padding=0, zebra_stripes=False, **kwargs)
        self._shown: dict[tuple[str, str], str] = {}  # (uuid, column) -> plain text on screen
        self._shown_styles: dict[tuple[str, str], str] = {}
        self.view = "hardware"
        self.marked: set[str] = set()  # GPUs picked for a power change (space, T)

    @property
    def columns_shown(self) -> tuple[tuple[str, str, int], ...]:
        return VIEWS[self.view]

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label, width in self.columns_shown:
            self.add_column(f" {label:>{width}}", key=key, width=width + 1)

    def switch_view(self) -> str:
        """Hardware columns <-> training columns (80 columns hold one set)."""
        cursor = self.cursor_row
        self.view = "training" if self.view == "hardware" else "hardware"
        self.clear(columns=True)
        self._shown.clear()
        self._shown_styles.clear()
        self._add_columns()
        self._restore_cursor = cursor
        return self.view

    _restore_cursor: int | None = None

    def show(self, gpus: list[dict[str, Any]], palette: Palette, ranks: list[dict[str, Any]] | None = None) -> None:
        by_rank = {rank["rank"]: rank for rank in ranks or []}
        columns = self.columns_shown
        for gpu in gpus:
            uuid = gpu["uuid"]
            cells = row_cells(gpu, palette, by_rank, columns, marked=uuid in self.marked)
            if uuid not in self.rows:
                self.add_row(*(cells[key] for key, _, _ in columns), key=uuid)
                for key, _, _ in columns:
                    self._shown[(uuid, key)] = cells[key].plain
                    self._shown_styles[(uuid, key)] = str(cells[key].style)
                continue
            for key, text in cells.items():
                plain, style = text.plain, str(text.style)
                if self._shown.get((uuid, key)) != plain or self._shown_styles.get((uuid, key)) != style:
                    self.update_cell(uuid, key, text)
                    self._shown[(uuid, key)] = plain
                    self._shown_styles[(uuid, key)] = style
        if self._restore_cursor is not None and self.row_count:
            self.move_cursor(row=min(self._restore_cursor, self.row_count - 1))
            self._restore_cursor = None

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *, update_width: bool = False) -> None:
        """DataTable.update_cell repaints the whole table; this repaints the one cell, so a tick
        writes to the terminal only what changed (over SSH, bytes are what the user pays).
        Widths never change here: every cell is padded to its column's fixed width."""
        row_index = self.get_row_index(row_key)
        column_index = self.get_column_index(column_key)
        self._data[row_key][column_key] = value
        self._update_count += 1  # DataTable's render caches are keyed by this count
        self.refresh_coordinate(Coordinate(row_index, column_index))

    def forget_styles(self) -> None:
        """After a theme change every styled cell must be rewritten."""
        self._shown_styles.clear()

    @property
    def selected_uuid(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value
