"""The snapshot: its keys, units in names, and what follows from the readings."""

from __future__ import annotations

from gpumix.hub import Hub
from gpumix.sim.machine import GpuActivity

TOP_KEYS = {"version", "timestamp_s", "hostname", "source", "driver", "gpus", "host", "p2p", "ranks", "findings", "plan"}


def test_snapshot_shape(demo_hub: Hub) -> None:
    snapshot = demo_hub.snapshot()
    assert TOP_KEYS <= set(snapshot)
    gpu = snapshot["gpus"][0]
    for key in ("index", "uuid", "name", "tier", "util_gpu_pct", "mem_used_bytes", "power_w", "power_cap_w",
                "temperature_c", "clock_event_reasons", "pcie_link_gen_current", "pcie_link_width_current",
                "pcie_gen_max", "pcie_width_max", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s",
                "pcie_rx_link_share", "pcie_replay_count", "energy_j", "processes", "lost"):
        assert key in gpu, key
    assert gpu["tier"] == "RTX 3060 12G"
    assert len(snapshot["p2p"]) == 45  # 10 choose 2
    assert all(link["read"] == "GPU not supported" for link in snapshot["p2p"])


def test_link_share_is_rate_over_current_link(demo_hub: Hub) -> None:
    gpu = demo_hub.snapshot()["gpus"][2]  # the 3060 on an x1 riser
    assert gpu["pcie_link_width_current"] == 1
    assert abs(gpu["pcie_rx_link_share"] - gpu["pcie_rx_bytes_per_s"] / 1.969e9) < 0.01


def test_link_below_max_flagged_only_under_load(demo_hardware, clock) -> None:
    machine = demo_hardware.machine
    machine.synthetic_job = False
    hub = Hub(demo_hardware, host_sampler=None, clock=clock)
    snapshot = hub.tick()
    idle = snapshot["gpus"][7]
    assert idle["pcie_link_gen_current"] == 1 and not idle["pcie_link_below_max_under_load"]
    # Under load but stuck at gen3 (a bad riser): flagged.
    machine.set_activity(7, GpuActivity(busy_fraction=0.9, util_pct=90))
    original = machine.link_gen_current
    machine.link_gen_current = lambda index: 3 if index == 7 else original(index)  # type: ignore[method-assign]
    clock.advance(1)
    loaded = hub.tick()["gpus"][7]
    assert loaded["under_load"] and loaded["pcie_link_below_max_under_load"]


def test_history_is_bounded(demo_hardware, clock) -> None:
    hub = Hub(demo_hardware, interval_s=1.0, history_s=5.0, clock=clock)
    for _ in range(20):
        hub.tick()
        clock.advance(1)
    assert len(hub.series(0, "power_w")) == 5


def test_lost_gpu_stays_in_table(demo_hardware, clock) -> None:
    hub = Hub(demo_hardware, clock=clock)
    hub.tick()
    demo_hardware.machine.lost.add(4)
    clock.advance(1)
    snapshot = hub.tick()
    assert len(snapshot["gpus"]) == 10
    assert snapshot["gpus"][4]["lost"] and snapshot["gpus"][4]["power_w"] is None
    assert not snapshot["gpus"][5]["lost"]
