"""The GPU table: one row per GPU, cells rewritten and repainted only when their text changed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding

from gpumix.tui import format as fmt
from gpumix.tui.keyed_table import KeyedTable
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
# From WIDE_MIN_WIDTH columns on, the width goes to what 80 columns leave out: clocks, fan,
# energy, the throttle reason in full and the tier's whole name (issue 12: 120 columns wasted).
WIDE_MIN_WIDTH = 120
HARDWARE_WIDE_COLUMNS = (
    ("index", "#", 3),
    ("tier", "GPU", 13),
    ("util", "Util", 4),
    ("mem", "Mem", 8),
    ("power", "Power", 9),
    ("temp", "Temp", 4),
    ("fan", "Fan", 4),
    ("sm_clock", "SM MHz", 6),
    ("mem_clock", "Mem MHz", 7),
    ("energy", "kJ", 7),
    ("throttle", "Held by", 11),
    ("link", "PCIe link", 10),
    ("rx", "RX/s", 5),
    ("tx", "TX/s", 5),
    ("link_share", "Lnk%", 4),
)
TRAINING_WIDE_COLUMNS = (
    ("index", "#", 3),
    ("tier", "GPU", 13),
    ("util", "Util", 4),
    ("mem", "Mem", 8),
    ("power", "Power", 9),
    ("rank", "Rank", 5),
    ("step", "Step", 6),
    ("step_time", "Step s", 6),
    ("samples", "Smp/s", 6),
    ("comm", "Comm%", 5),
    ("wait", "Wait%", 5),
    ("peak", "Peak", 5),
    ("loss", "Loss", 24),
)
VIEWS = {"hardware": HARDWARE_COLUMNS, "training": TRAINING_COLUMNS}
WIDE_VIEWS = {"hardware": HARDWARE_WIDE_COLUMNS, "training": TRAINING_WIDE_COLUMNS}
THROTTLE_SHORT = {"power cap": "pwr", "SW thermal": "thm", "HW thermal": "thm", "HW slowdown": "hw", "power brake": "brk", "idle": "idle"}


def short_tier(tier: str) -> str:
    """'RTX 3090 24G' -> '3090 24G': the table is 80 columns wide. Safe to show (see fmt.plain)."""
    return fmt.plain(tier).removeprefix("RTX ").removeprefix("GeForce ")


def node_tier(gpu: dict[str, Any], width: int = 9) -> str:
    """The GPU column; with several nodes attached, 'node:model' (e.g. 'n2:3090') to stay 9 wide.
    Wider, the tier's whole name ('RTX 3090 24G')."""
    label = gpu.get("node_label")
    tier = fmt.plain(gpu["tier"]) if width > 9 and len(fmt.plain(gpu["tier"])) <= width else short_tier(gpu["tier"])
    if not label:
        return tier
    model = tier if width > 9 else tier.split(" ")[0]
    return f"{fmt.plain(label)}:{model}"[:width]


def throttle_label(reasons: list[str] | None) -> str:
    if reasons is None:
        return fmt.NA
    for reason in ("HW slowdown", "power brake", "HW thermal", "SW thermal", "power cap", "idle"):
        if reason in reasons:
            return THROTTLE_SHORT[reason]
    return "-"


THROTTLE_ORDER = ("HW slowdown", "power brake", "HW thermal", "SW thermal", "power cap", "idle")


def throttle_full(reasons: list[str] | None) -> str:
    """The most telling reason in full ('HW slowdown'), '+' when others hold the clocks too."""
    if reasons is None:
        return fmt.NA
    known = [reason for reason in THROTTLE_ORDER if reason in reasons]
    if not known:
        return "-"
    return known[0] + ("+" if len(known) > 1 else "")


def link_label(gpu: dict[str, Any]) -> str:
    now = fmt.link(gpu["pcie_link_gen_current"], gpu["pcie_link_width_current"])
    top = fmt.link(gpu["pcie_gen_max"], gpu["pcie_width_max"])
    flag = "!" if gpu["pcie_link_below_max_under_load"] else ""
    return f"{now}/{top}{flag}"


TRAINING_KEYS = ("rank", "step", "step_time", "samples", "comm", "wait", "peak", "loss")


def training_cells(gpu: dict[str, Any], ranks: dict[int, dict[str, Any]], palette: Palette,
                   loss_width: int = 12) -> dict[str, tuple[str, Any]]:
    """The first rank on this GPU: its step, speed, shares of the step and loss."""
    on_gpu = [ranks[r] for r in gpu.get("ranks", []) if r in ranks]
    if not on_gpu:
        return {key: ("", None) for key in TRAINING_KEYS}
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
        "loss": (fmt.spark(rank["loss_history"], loss_width, relative=True), None),
    }


def row_cells(gpu: dict[str, Any], palette: Palette, ranks: dict[int, dict[str, Any]] | None = None,
              columns: tuple[tuple[str, str, int], ...] = HARDWARE_COLUMNS, marked: bool = False) -> dict[str, Text]:
    """The text of each cell of one GPU's row, styled where it flags something."""
    widths = {key: width for key, _, width in columns}
    index = f"*{fmt.plain(gpu['index'])}" if marked else fmt.plain(gpu["index"])
    cells: dict[str, tuple[str, Any]] = {"index": (index, palette.warning if marked else None),
                                         "tier": (node_tier(gpu, widths.get("tier", 9)), None)}
    if gpu["lost"]:
        cells["util"] = ("LOST", palette.error)
        for key, _, _ in columns:
            cells.setdefault(key, ("", None))
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
        if "fan" in widths:  # the wide columns
            energy_kj = fmt.fixed(gpu.get("energy_j"), 0, scale=1 / 1000)
            cells.update(
                fan=(fmt.pct(gpu.get("fan_pct")), None),
                sm_clock=(fmt.mhz(gpu.get("clock_sm_mhz")), None),
                mem_clock=(fmt.mhz(gpu.get("clock_mem_mhz")), None),
                energy=(energy_kj if len(energy_kj) <= widths["energy"] else "big", None),
                throttle=(throttle_full(gpu["clock_event_reasons"]), cells["throttle"][1]),
            )
        if "rank" in widths:
            cells.update(training_cells(gpu, ranks or {}, palette, widths.get("loss", 12)))
    return {key: Text(f" {text:>{widths[key]}}", style=style or "") for key, (text, style) in cells.items() if key in widths}


class GpuTable(KeyedTable):
    """Rows keyed by GPU UUID, columns by name: a tick rewrites and repaints only changed cells."""

    BINDINGS = [Binding("enter", "select_cursor", "Charts", show=False, id="gpus.charts")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", cell_padding=0, zebra_stripes=False, **kwargs)
        self.view = "hardware"
        self.wide = False  # WIDE_VIEWS' columns: the terminal is at least WIDE_MIN_WIDTH wide
        self.marked: set[str] = set()  # GPUs picked for a power change (space, T)

    @property
    def columns_shown(self) -> tuple[tuple[str, str, int], ...]:
        return (WIDE_VIEWS if self.wide else VIEWS)[self.view]

    def on_mount(self) -> None:
        self.wide = self.app.size.width >= WIDE_MIN_WIDTH
        self._add_columns()

    def fit_width(self, width: int) -> bool:
        """Take the column set that suits a terminal `width` columns wide; True when it changed."""
        wide = width >= WIDE_MIN_WIDTH
        if wide == self.wide:
            return False
        self.wide = wide
        self._rebuild()
        return True

    def _add_columns(self) -> None:
        for key, label, width in self.columns_shown:
            self.add_column(Text(f" {label:>{width}}"), key=key, width=width + 1)  # a str is markup: rich loads its emoji table

    def switch_view(self) -> str:
        """Hardware columns <-> training columns (80 columns hold one set)."""
        self.view = "training" if self.view == "hardware" else "hardware"
        self._rebuild()
        return self.view

    def _rebuild(self) -> None:
        """New columns: every row is added again at the next show, the cursor kept."""
        cursor = self.cursor_row
        self.clear(columns=True)
        self._add_columns()
        self._restore_cursor = cursor

    _restore_cursor: int | None = None

    def show(self, gpus: list[dict[str, Any]], palette: Palette, ranks: list[dict[str, Any]] | None = None) -> None:
        by_rank = {rank["rank"]: rank for rank in ranks or []}
        columns = self.columns_shown
        self.sync({gpu["uuid"]: row_cells(gpu, palette, by_rank, columns, marked=gpu["uuid"] in self.marked)
                   for gpu in gpus})
        if self._restore_cursor is not None and self.row_count:
            self.move_cursor(row=min(self._restore_cursor, self.row_count - 1))
            self._restore_cursor = None

    def forget_styles(self) -> None:
        """After a theme change every styled cell must be rewritten."""
        self.forget_cells()

    @property
    def selected_uuid(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value
