"""What an idle GPU rewrites on the dashboard each second (issue 13: bytes to the terminal at 80x24).

The title's clock says the minute, so a new snapshot within the minute leaves the title as it was;
PCIe rates below 1 MB/s (an idle card's housekeeping: an idle H200 read 30-60 KB/s RX and
340-370 KB/s TX, a new value every second) read "<1M"; energy is in whole kJ. A snapshot that stops
coming is still said in the title ("hub lost"), though the clock no longer moves every second.
Real Textual under Pilot; time moves through the snapshots' stamps and the watch's arrival time.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from gpumix.hub import Hub
from gpumix.tui import format as fmt
from gpumix.tui.app import GpumixApp
from gpumix.tui.panels import detail_text, title_line
from gpumix.tui.text_panel import TextPanel
from tests.screen import screen_text, started

pytestmark = pytest.mark.usefixtures("tui_env")

MINUTE_S = 1_764_500_040.0  # 10:54:00 UTC: a whole minute
# (tx, rx) bytes/s an idle H200's counters read on consecutive ticks
# (benchmarks/results/sampling_idle_h200_2026-12-01.json)
IDLE_H200 = [(340397.8, 30417.6), (341854.2, 33062.1), (369106.2, 52356.5), (711000.6, 343881.1), (342309.6, 32435.8)]


def at(snapshot: dict[str, Any], stamp_s: float, **gpu0: Any) -> dict[str, Any]:
    """The snapshot stamped `stamp_s`, GPU 0's readings replaced by `gpu0`."""
    moved = copy.deepcopy(snapshot)
    moved["timestamp_s"] = stamp_s
    moved["gpus"][0].update(gpu0)
    return moved


def test_the_title_clock_says_the_minute() -> None:
    snapshot = {"driver": {"driver_version": "580", "cuda_driver_version": "13.0"}, "hostname": "h",
                "source": "nvml", "findings": []}
    first, last = (title_line({**snapshot, "timestamp_s": MINUTE_S + s}) for s in (0.0, 59.9))
    assert first == last and first.endswith(" · 10:54"), first
    assert title_line({**snapshot, "timestamp_s": MINUTE_S + 60}).endswith(" · 10:55")


def test_idle_pcie_rates_read_the_same_and_traffic_reads_in_full() -> None:
    assert {fmt.rate(value) for pair in IDLE_H200 for value in pair} == {"<1M"}
    assert fmt.rate(0) == "<1M"
    assert [fmt.rate(v) for v in (1e6, 7.04e6, 456e6, 12.3e9)] == ["1.0M", "7.0M", "456M", "12.3G"]
    assert fmt.rate(None) == fmt.rate(float("nan")) == fmt.NA


async def test_a_snapshot_within_the_minute_repaints_no_title(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        snapshot = demo_hub.snapshot()
        title = app.query_one("#title", TextPanel)
        app._received(at(snapshot, MINUTE_S + 1))
        await pilot.pause()
        shown = title.text
        for second in (2, 30, 59.5):
            app._received(at(snapshot, MINUTE_S + second))
            await pilot.pause()
            assert title.text == shown, second
        app._received(at(snapshot, MINUTE_S + 61))
        await pilot.pause()
        assert title.text != shown and title.text.endswith("10:55")


async def test_idle_noise_leaves_the_screen_as_it_was(demo_hub: Hub) -> None:
    """An idle GPU's snapshots one second apart: PCIe housekeeping noise and 75 J more energy
    change nothing on the screen (the table's RX/TX, the detail panel's rates and energy, the title)."""
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        snapshot = demo_hub.snapshot()
        screens = []
        for second, (tx, rx) in enumerate(IDLE_H200):
            app._received(at(snapshot, MINUTE_S + second, pcie_tx_bytes_per_s=tx, pcie_rx_bytes_per_s=rx,
                                   energy_j=1_234_560.0 + 75.0 * second))
            await pilot.pause()
            screens.append(screen_text(app))
        assert "<1M" in screens[0] and "1235 kJ" in screens[0], screens[0]
        assert all(screen == screens[0] for screen in screens), "\n\n".join(screens)


def test_energy_reads_in_whole_kj() -> None:
    gpu = {"index": 0, "name": "H200", "pci_bus_id": "0", "uuid": "GPU-x", "lost": False, "power_cap_w": 700.0,
           "power_w": 75.0, "pcie_link_bytes_per_s_max": 63e9, "util_gpu_pct": 0.0, "power_limit_min_w": 200.0,
           "power_limit_max_w": 700.0, "power_limit_default_w": 700.0, "pcie_rx_bytes_per_s": 3e4,
           "pcie_tx_bytes_per_s": 3.4e5, "pcie_link_gen_current": 5, "pcie_link_width_current": 16,
           "pcie_gen_max": 5, "pcie_width_max": 16, "pcie_gen_max_gpu": 5, "clock_sm_mhz": 345.0,
           "clock_mem_mhz": 3201.0, "fan_pct": None, "pcie_replay_count": 0, "clock_event_reasons": [],
           "processes": [], "energy_j": 1_234_499.0}
    text = detail_text(gpu, lambda index, name: [])
    assert "energy 1234 kJ" in text, text
    assert detail_text({**gpu, "energy_j": 1_234_499.0 + 75.0}, lambda index, name: []) != text  # 1234.574 kJ: 1235
    assert detail_text({**gpu, "energy_j": 1_234_501.0 + 75.0 * 6}, lambda index, name: []) == \
        detail_text({**gpu, "energy_j": 1_234_501.0}, lambda index, name: [])


async def test_data_that_stops_is_said_though_the_clock_shows_minutes(demo_hub: Hub) -> None:
    """No snapshot for longer than the watch allows: the title says the hub is lost and how long,
    and the values dim; the next snapshot brings the minute's clock back."""
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        title = app.query_one("#title", TextPanel)
        app._received(at(demo_hub.snapshot(), MINUTE_S + 5))
        await pilot.pause()
        assert title.text.endswith("10:54") and not app.stale
        app._received_at_s = app._answered_at_s = time.monotonic() - app.stale_after_s - 7  # the last snapshot came that long ago
        app._check_stale()
        await pilot.pause()
        assert app.stale and app.has_class("-stale")
        assert title.text.startswith("hub lost — reconnecting (") and " s)" in title.text, title.text
        app._received(at(demo_hub.snapshot(), MINUTE_S + 200))
        await pilot.pause()
        assert not app.stale and title.text.endswith("10:57"), title.text
