"""Secondary screens: help, P2P/topology, processes, and one GPU's history charts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpumix.hw.topology import topology_text
from gpumix.tui import format as fmt
from gpumix.tui.chart import LARGEST_FULL, SMALLEST_FULL, data_full_scale, fixed_scale, line_chart
from gpumix.tui.dialog import Dialog
from gpumix.tui.keyed_table import KeyedTable
from gpumix.tui.snapshot_view import SnapshotView
from gpumix.tui.text_panel import TextPanel

# Rich markup ([b]...[/b]); lines within 72 columns, so the box does not wrap them at 80x24.
HELP_INTRO = "[b]gpumix-top[/b] — a mixed box's GPUs, links and power, beside training."
HELP_VIEW_KEYS = """\
[b]Keys[/b]
  ↑/↓ or j/k   select a GPU          enter   history charts of the GPU
  v            hardware / training columns
  r            ranks of the job      f       advice (the findings)
  g            tiers: who waits, who drags
  t            P2P and topology      p       processes on the GPUs
  ctrl+p       command palette (themes: "Change theme")
  ?            this help             q       quit (esc closes a screen)"""
HELP_CONTROL_KEYS = """\
[b]Controls[/b] (--readonly hides them)
  c            power cap of the selected (or marked) GPUs
  space        mark a GPU            T       add its tier to the marks
  u            clear all marks
  b            fit the caps to the power budget
  s            re-plan the per-rank split (a job under `gpumix run`;
               the restart asks first)
  m            measure the links with gpumix probe (asks first)"""
HELP_TABLE = """\
[b]GPU table[/b]
  Util   GPU utilization (nvidia-smi utilization.gpu); < 50 % flagged
  Mem    memory used / total          Power   draw / cap in W
  Thr    why clocks are held: pwr (power cap), thm (thermal), hw,
         idle, - none
  Link   PCIe gen x width now / max for card and slot together;
         '!' = below max under load (at idle a drop to gen1 is normal)
  RX/TX  PCIe bytes/s (<1M: idle)     Lnk%    busier direction's share
  N/A    the driver does not report it for this card"""


def help_text(controls: bool = True, more: str = "") -> str:
    """The help box's text: the keys, the controls when the app has them, `more` (markup, such as
    a replay's player keys), then the table's columns."""
    parts = [HELP_INTRO, HELP_VIEW_KEYS, *([HELP_CONTROL_KEYS] if controls else []), *([more] if more else []),
             HELP_TABLE]
    return "\n\n".join(parts) + "\n"


HELP_TEXT = help_text()


class HelpScreen(Dialog[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="help.close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 78; max-height: 22; border: round $primary; background: $surface; padding: 0 1; }
    """

    def __init__(self, text: str = HELP_TEXT) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.text, id="help-text")


class TopologyScreen(SnapshotView):
    BINDINGS = [Binding("escape,t", "app.pop_screen", "Back", id="topology.back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield TextPanel(id="topology-text")
        yield Footer(compact=True)  # compact, as every screen: its keys stay in view at 80 columns

    def show(self, snapshot: dict[str, Any]) -> None:
        # The link names come from the hub: each line shown as plain text, controls made visible.
        lines = topology_text(snapshot).split("\n")
        self.query_one("#topology-text", TextPanel).show("\n".join(fmt.plain(line) for line in lines))


class ProcessesScreen(SnapshotView):
    BINDINGS = [Binding("escape,p", "app.pop_screen", "Back", id="processes.back")]
    COLUMNS = (("gpu", "GPU"), ("pid", "PID"), ("user", "User"), ("gpu_mem", "GPU mem"),
               ("cpu", "CPU%"), ("rss", "RSS"), ("command", "Command"))

    def compose(self) -> ComposeResult:
        yield KeyedTable(id="processes", cursor_type="row")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one(KeyedTable)
        for key, label in self.COLUMNS:
            table.add_column(Text(label), key=key)  # a str is markup: rich would load its emoji table

    def show(self, snapshot: dict[str, Any]) -> None:
        # Text, not str: a DataTable parses a str cell as markup ("[/data/a.bin]" would crash it).
        self.query_one(KeyedTable).sync({
            f"{gpu['index']}:{proc['pid']}": dict(zip((key for key, _ in self.COLUMNS), (Text(cell) for cell in (
                fmt.plain(gpu["index"]), fmt.plain(proc["pid"]), fmt.plain(proc["user"] or None),
                fmt.gib(proc["gpu_mem_bytes"]) + "G", fmt.pct(proc["cpu_pct"]),
                fmt.gib(proc["rss_bytes"]) + "G", fmt.plain(proc["command"] or proc["name"] or None)[:60],
            )), strict=True))
            for gpu in snapshot["gpus"] for proc in gpu["processes"]})


@dataclass(frozen=True)
class ChartSpec:
    """One chart: the history field, its title and unit, and where its full scale comes from."""

    field: str
    title: str
    to_unit: float  # the series' unit (bytes, B/s) times this is the chart's (GiB, GB/s)
    full_fields: tuple[str, ...]  # snapshot fields holding the full scale, best first (series unit)
    full_name: str  # what the full scale is, for the title


CHARTS = (
    ChartSpec("util_gpu_pct", "Utilization %", 1.0, (), ""),
    ChartSpec("power_w", "Power W", 1.0, ("power_cap_w", "power_limit_max_w"), "cap"),
    ChartSpec("pcie_rx_bytes_per_s", "PCIe RX GB/s", 1e-9, ("pcie_link_bytes_per_s_max",), "link max"),
    ChartSpec("pcie_tx_bytes_per_s", "PCIe TX GB/s", 1e-9, ("pcie_link_bytes_per_s_max",), "link max"),
    ChartSpec("mem_used_bytes", "Memory GiB", 1 / 1024**3, ("mem_total_bytes",), "total"),
)
UTIL_FULL_PCT = 100.0
OVER_FULL = 1.05  # history this far above a full scale (a cap lowered since) takes the next one


def full_scale(spec: ChartSpec, gpu: dict[str, Any], values: list[float | None]) -> tuple[float, str]:
    """The value the chart's top row stands for, in the chart's unit, and its name (empty when
    it is the metric's own: 100 %). The first of the spec's fields that is a sane number and holds
    the history; for power the cap in force, so a flat line at the cap sits on the top row."""
    if spec.field == "util_gpu_pct":
        return UTIL_FULL_PCT, ""
    highest = max((v for v in values if v is not None), default=0.0)
    for name in spec.full_fields:
        full = fmt.number(gpu.get(name))
        if name == "power_cap_w" and full is not None:  # the enforced limit may be above the set one
            full = max(full, fmt.number(gpu.get("power_cap_enforced_w")) or 0.0)
        if full is not None and SMALLEST_FULL <= full * spec.to_unit <= LARGEST_FULL:
            full *= spec.to_unit
            if highest <= full * OVER_FULL:
                label = "max cap" if name == "power_limit_max_w" else spec.full_name
                return full, label
    return data_full_scale(values), "largest value"


def chart_text(spec: ChartSpec, gpu: dict[str, Any], raw_values: list[Any], width: int, interval_s: float) -> str:
    """One GPU's history of one metric on its fixed scale, with the scale said in the title."""
    values = [v * spec.to_unit if (v := fmt.number(raw)) is not None else None for raw in raw_values]
    values = [v if v is None or abs(v) <= LARGEST_FULL else None for v in values]  # no physical reading
    full, full_name = full_scale(spec, gpu, values)
    scale = fixed_scale(full)
    title = f"{spec.title}  (scale 0–{scale.label(scale.steps)}"
    title += f"; {full_name} {full:.4g})" if full_name else ")"
    present = [v for v in values if v is not None]
    if present and (max(present) > scale.top + scale.step / 2 or min(present) < -scale.step / 2):
        title += " · values beyond the scale drawn at its edge"
    return line_chart(values, scale, width, interval_s, title)


class GpuChartsScreen(SnapshotView):
    """History of one GPU: utilization, power, PCIe RX/TX, memory, over the kept minutes."""

    BINDINGS = [Binding("escape,enter", "app.pop_screen", "Back", id="charts.back")]

    def __init__(self, uuid: str) -> None:
        super().__init__()
        self.uuid = uuid

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield TextPanel(id="charts-title")
            for spec in CHARTS:
                yield TextPanel(id=f"chart-{spec.field}")
        yield Footer(compact=True)

    def show(self, snapshot: dict[str, Any]) -> None:
        # the series' own spacing where the app knows it (a replay polls faster than it was recorded)
        series, interval_s = self.app.cached_series, getattr(self.app, "series_interval_s", self.app.interval_s)
        gpu = next((g for g in snapshot["gpus"] if g["uuid"] == self.uuid), None)
        if gpu is None:
            return
        title = (f"GPU {fmt.plain(gpu['index'])} {fmt.plain(gpu['tier'])} — last {len(series(gpu['index'], 'power_w'))} samples,"
                 f" {interval_s:g} s apart")
        self.query_one("#charts-title", TextPanel).show(title)
        width = max(40, self.size.width - 2)
        for spec in CHARTS:
            text = chart_text(spec, gpu, series(gpu["index"], spec.field), width, interval_s)
            self.query_one(f"#chart-{spec.field}", TextPanel).show(text)
