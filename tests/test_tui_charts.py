"""The GPU history charts (Enter on a GPU): fixed labelled scales, values on the rows labelled with
them, a time axis in seconds ago (issue 12, item 4)."""

from __future__ import annotations

import random
import re

import pytest
from textual.widgets import Static

from gpumix.hub import Hub
from gpumix.record.replay import ReplaySource
from gpumix.tui.app import GpumixApp
from gpumix.tui.replay import ReplayApp
from gpumix.tui.screens import CHARTS, GpuChartsScreen, chart_text
from tests.conftest import ManualClock
from tests.screen import started
from tests.test_recording import recorded_hub
from tests.waiting import wait_until_async

GIB = 1024**3
ROW = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s?┤(.*)$")  # "170 ┤⠒⠒⠒": a y label and its row of the plot
BRAILLE = re.compile("[\u2801-\u28ff]")
SPEC = {spec.field: spec for spec in CHARTS}
GPU_3060 = {"power_cap_w": 170.0, "power_cap_enforced_w": 170.0, "power_limit_max_w": 200.0,
            "mem_total_bytes": 12 * GIB, "pcie_link_bytes_per_s_max": 7.876923e9}

pytestmark = pytest.mark.usefixtures("tui_env")


def plot_rows(text: str) -> list[tuple[float, str, str]]:
    """(value of the label, the label as written, the plotted cells) of each row, top first."""
    return [(float(m[1]), m[1], m[2]) for line in text.splitlines() if (m := ROW.match(line))]


def rows_drawn(text: str) -> list[float]:
    """The labels of the rows that hold any of the line."""
    return [value for value, _, cells in plot_rows(text) if BRAILLE.search(cells)]


def resolution(text: str) -> float:
    """The value between two neighbouring rows."""
    values = sorted(value for value, _, _ in plot_rows(text))
    gaps = {round(b - a, 9) for a, b in zip(values, values[1:], strict=False)}
    assert len(gaps) == 1, f"rows not evenly spaced: {values}"
    return gaps.pop()


def chart(field: str, values: list, gpu: dict | None = None, width: int = 78, interval_s: float = 1.0) -> str:
    return chart_text(SPEC[field], gpu or GPU_3060, values, width, interval_s)


@pytest.mark.parametrize(("field", "value", "scale"), [
    ("power_w", 170.0, 1.0),  # the flat 170 W line, drawn on the 198.3 row
    ("power_w", 143.0, 1.0),
    ("mem_used_bytes", 11.4, GIB),  # 11.4 GiB was on the 13.3 row
    ("util_gpu_pct", 33.0, 1.0),
    ("pcie_rx_bytes_per_s", 3.2, 1e9),
])
def test_a_flat_line_sits_on_the_row_labelled_with_its_value(field: str, value: float, scale: float) -> None:
    text = chart(field, [value * scale] * 60)
    drawn = rows_drawn(text)
    assert len(drawn) == 1, f"a flat line on one row, not {drawn}:\n{text}"
    assert abs(drawn[0] - value) <= resolution(text) / 2, f"{value} drawn on the row labelled {drawn[0]}:\n{text}"


def test_a_flat_line_at_the_cap_sits_on_the_row_labelled_with_the_cap() -> None:
    text = chart("power_w", [170.0] * 60)
    assert rows_drawn(text) == [170.0], text
    assert "cap 170" in text.splitlines()[0]


def test_scales_are_fixed_by_the_metric_not_by_the_data() -> None:
    rng = random.Random(12)
    noisy_util = [97 + 3 * rng.random() for _ in range(120)]
    text = chart("util_gpu_pct", noisy_util)
    labels = [value for value, _, _ in plot_rows(text)]
    assert (min(labels), max(labels)) == (0.0, 100.0), text
    assert rows_drawn(text) == [100.0], f"97-100 % noise swings over the whole chart:\n{text}"
    # PCIe to the link's maximum (7.88 GB/s per direction: the row above it is 8), memory to the card's
    pcie = chart("pcie_tx_bytes_per_s", [0.5068039e9 + rng.random() * 8e2 for _ in range(120)])
    assert [value for value, _, _ in plot_rows(pcie)][::len(plot_rows(pcie)) - 1] == [8.0, 0.0], pcie
    assert len(rows_drawn(pcie)) == 1, pcie
    memory = chart("mem_used_bytes", [2 * GIB, 5 * GIB])
    assert [value for value, _, _ in plot_rows(memory)][0] == 12.0, memory
    # a cap lowered since (history above it) takes the card's highest cap instead of clipping
    lowered = chart("power_w", [170.0] * 30 + [120.0] * 30, {**GPU_3060, "power_cap_w": 120.0, "power_cap_enforced_w": 120.0})
    assert plot_rows(lowered)[0][0] == 200.0 and "max cap 200" in lowered.splitlines()[0], lowered


def test_labels_are_written_one_way_and_the_time_axis_says_its_unit() -> None:
    for field, values in (("power_w", [170.0] * 37), ("mem_used_bytes", [11.4 * GIB] * 600),
                          ("pcie_rx_bytes_per_s", [1.0e8] * 9)):
        text = chart(field, values, interval_s=1.0)
        written = [label for _, label, _ in plot_rows(text)]
        assert len({len(label.partition(".")[2]) for label in written}) == 1, f"mixed decimals {written}"
        lines = text.splitlines()
        assert lines[-1].strip() == "seconds ago", text
        ticks = lines[-2].split()
        assert len(ticks) >= 2 and len({len(t.partition(".")[2]) for t in ticks}) == 1, f"mixed x labels {ticks}"
        seconds = [float(t) for t in ticks]
        assert seconds == sorted(seconds, reverse=True) and seconds[-1] == 0.0 and min(seconds) >= 0, ticks
        assert seconds[0] <= len(values) - 1, f"the axis spans {len(values) - 1} s, not {seconds[0]}"


def test_bad_readings_are_gaps_and_a_bad_full_scale_falls_back() -> None:
    bad = [float("nan"), float("inf"), None, 1.7e308, "12", True, 150.0]
    text = chart("power_w", bad, {"power_cap_w": float("nan"), "power_limit_max_w": -5})
    assert rows_drawn(text) and all(abs(value - 150.0) <= resolution(text) / 2 for value in rows_drawn(text)), text
    assert "largest value 150" in text.splitlines()[0]


async def test_the_chart_screen_on_the_demo_draws_on_fixed_labelled_scales(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=1.0)
    gpu = demo_hub.snapshot()["gpus"][0]  # an RTX 3060 at its 170 W cap, 100 % busy
    async with app.run_test(size=(100, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("enter")
        await wait_until_async(lambda: isinstance(app.screen, GpuChartsScreen), pause=pilot.pause, what="the charts")

        def drawn(field: str) -> str:
            return str(app.screen.query_one(f"#chart-{field}", Static).render())

        await wait_until_async(lambda: rows_drawn(drawn("power_w")), pause=pilot.pause, what="a drawn power chart")
        util, power = drawn("util_gpu_pct"), drawn("power_w")
        labels = [value for value, _, _ in plot_rows(util)]
        assert (min(labels), max(labels)) == (0.0, 100.0), util
        assert gpu["power_w"] == gpu["power_cap_w"] == 170.0
        assert rows_drawn(power) == [170.0], power
        assert power.splitlines()[-1].strip() == "seconds ago"


async def test_a_replay_charts_its_samples_at_the_recorded_spacing_not_its_poll(demo_hardware, clock: ManualClock,
                                                                                 tmp_path) -> None:
    path = tmp_path / "rec.sqlite"
    _, recorder = recorded_hub(demo_hardware, clock, path, ticks=21)  # one sample a second
    recorder.close()
    source = ReplaySource(path, clock=ManualClock(0.0))
    source.seek(10_000)
    source.toggle_pause()
    app = ReplayApp(source)  # polls at 4 Hz
    async with app.run_test(size=(100, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("enter")
        await wait_until_async(lambda: isinstance(app.screen, GpuChartsScreen), pause=pilot.pause, what="the charts")
        await wait_until_async(lambda: rows_drawn(str(app.screen.query_one("#chart-power_w", Static).render())),
                               pause=pilot.pause, what="a drawn power chart")
        title = str(app.screen.query_one("#charts-title", Static).render())
        samples = int(re.search(r"last (\d+) samples", title)[1])
        assert samples >= 15 and "1 s apart" in title, title
        ticks = [float(t) for t in str(app.screen.query_one("#chart-power_w", Static).render()).splitlines()[-2].split()]
        assert samples - 1 - 5 <= max(ticks) <= samples - 1, f"{samples} samples 1 s apart, the axis says {ticks}"
