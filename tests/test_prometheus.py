"""/metrics over real HTTP on 127.0.0.1 (ephemeral port), dcgm-exporter names and labels."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpumix.hub import Hub
from gpumix.hub.ranks import parse_step
from gpumix.record.prometheus import ListenError, MetricsServer, parse_listen
from tests.conftest import ManualClock
from tests.recording_helpers import add_ranks, step_ranks


def scrape(hub: Hub) -> dict[str, list]:
    server = MetricsServer(hub, "127.0.0.1", 0)
    try:
        assert server.port > 0
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        server.stop()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def test_metrics_have_dcgm_names_and_labels(demo_hub: Hub) -> None:
    metrics = scrape(demo_hub)
    util = metrics["DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 10
    gpus = demo_hub.snapshot()["gpus"]
    by_gpu = {sample.labels["gpu"]: sample for sample in util}
    for gpu in gpus:
        sample = by_gpu[str(gpu["index"])]
        assert sample.labels["UUID"] == gpu["uuid"]
        assert sample.labels["modelName"] == gpu["name"]
        assert sample.labels["tier"] == gpu["tier"] and sample.labels["Hostname"] == "rig01"
        assert sample.value == pytest.approx(gpu["util_gpu_pct"])
    fb_used = {s.labels["gpu"]: s.value for s in metrics["DCGM_FI_DEV_FB_USED"]}
    fb_free = {s.labels["gpu"]: s.value for s in metrics["DCGM_FI_DEV_FB_FREE"]}
    assert fb_used["3"] + fb_free["3"] == pytest.approx(gpus[3]["mem_total_bytes"] / 1024**2)  # MiB, as dcgm
    rx = {s.labels["gpu"]: s.value for s in metrics["DCGM_FI_DEV_PCIE_RX_THROUGHPUT"]}
    assert rx["3"] == pytest.approx(gpus[3]["pcie_rx_bytes_per_s"] / 1024)  # KB/s, as dcgm
    cap = {s.labels["gpu"]: s.value for s in metrics["DCGM_FI_DEV_POWER_MGMT_LIMIT"]}
    assert cap["0"] == pytest.approx(gpus[0]["power_cap_w"])
    for name in ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK",
                 "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "gpumix_pcie_link_gen", "gpumix_pcie_link_width"):
        assert len(metrics[name]) == 10, name
    replays = metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]  # the bare dcgm name, no _total
    assert replays and {s.name for s in replays} == {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}
    assert len(replays) == sum(1 for g in gpus if g["pcie_replay_count"] is not None)
    assert len(metrics["gpumix_pcie_link_share"]) == 20  # rx and tx
    assert metrics["gpumix_power_budget_watts"][0].value == 2800
    severities = {s.labels["severity"] for s in metrics["gpumix_findings"]}
    assert severities == {"info", "warning", "error"}
    assert metrics["gpumix_rank_step_time_seconds"] == []  # no ranks yet


def test_rank_and_tier_metrics_when_ranks_report(demo_hub: Hub) -> None:
    keys = add_ranks(demo_hub)
    for step in range(5):
        step_ranks(demo_hub, keys, step)
    metrics = scrape(demo_hub)
    step_time = metrics["gpumix_rank_step_time_seconds"]
    assert len(step_time) == 10 and {s.labels["job"] for s in step_time} == {"train"}
    assert {s.labels["rank"] for s in step_time} == {str(r) for r in range(10)}
    assert all(s.value == 0.5 for s in step_time)
    comm = {s.labels["rank"]: s.value for s in metrics["gpumix_rank_comm_share"]}
    assert comm["0"] == pytest.approx(0.2)
    straggler = {s.labels["rank"]: s.value for s in metrics["gpumix_rank_straggler"]}
    assert straggler["0"] == 1 and straggler["5"] == 0
    assert len(metrics["gpumix_rank_samples_per_second"]) == 10
    assert len(metrics["gpumix_rank_data_wait_share"]) == 10
    tiers = {s.labels["tier"]: s.value for s in metrics["gpumix_tier_wait_share"]}
    assert set(tiers) == {"RTX 3060 12G", "RTX 3090 24G", "RTX 4090 24G"}


def test_listen_address_parsing() -> None:
    assert parse_listen("9400") == ("127.0.0.1", 9400)
    assert parse_listen(":9400") == ("127.0.0.1", 9400)
    assert parse_listen("localhost:9400") == ("localhost", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    assert parse_listen("0.0.0.0:9400", public=True) == ("0.0.0.0", 9400)
    for refused in ("0.0.0.0:9400", "10.1.2.3:9400", "gpu-box:9400", "[::]:9400"):
        with pytest.raises(ListenError, match="--prometheus-public"):
            parse_listen(refused)
    with pytest.raises(ListenError, match="give a port"):
        parse_listen("127.0.0.1:http")


def test_public_address_without_the_flag_is_refused_in_one_line(capsys) -> None:
    from gpumix.cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main(["hub", "--demo", "--prometheus", "0.0.0.0:9400"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpumix: --prometheus 0.0.0.0:9400:") and "--prometheus-public" in err


def test_absurd_numbers_never_export_infinity(demo_hub: Hub) -> None:
    """One rank sending a denormal step time, 1e308 samples and -1e308 s of communication among honest
    ranks: no +Inf/NaN anywhere in /metrics, tier wait shares within 0-1, the fake rank no straggler."""
    keys = add_ranks(demo_hub, count=3)
    for step in range(5):
        step_ranks(demo_hub, keys, step)
    for step in range(5, 8):
        demo_hub.agent_step(keys[2], parse_step({"step": step, "step_time_s": 1e-308, "samples": 1e308,
                                                 "comm_s": -1e308}))
        demo_hub.agent_step(keys[2], parse_step({"step": step, "step_time_s": 0.5, "samples": 1e308,
                                                 "comm_s": -1e308, "data_wait_s": 1e308}))
    server = MetricsServer(demo_hub, "127.0.0.1", 0)
    try:
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        server.stop()
    assert "Inf" not in body and "NaN" not in body
    metrics = {family.name: family.samples for family in text_string_to_metric_families(body)}
    assert all(0.0 <= s.value <= 1.0 for s in metrics["gpumix_tier_wait_share"])
    straggler = {s.labels["rank"]: s.value for s in metrics["gpumix_rank_straggler"]}
    assert straggler == {"0": 1.0, "1": 0.0, "2": 0.0}
    rates = {s.labels["rank"]: s.value for s in metrics["gpumix_rank_samples_per_second"]}
    assert rates["2"] == pytest.approx(32 / 0.5)


def test_a_non_finite_value_is_left_out_not_exported() -> None:
    class Source:  # a snapshot from a remote hub or a replay can hold anything JSON holds
        def snapshot(self) -> dict:
            return {"hostname": "h", "gpus": [], "ranks": [
                {"rank": 0, "job": "j", "connected": True, "step_time_s": float("inf"), "samples_per_s": float("nan"),
                 "comm_share": 0.5, "straggler": False}],
                "tiers": [{"tier": "T", "wait_share": float("inf")}], "power_budget_w": float("-inf")}

    server = MetricsServer(Source(), "127.0.0.1", 0)
    try:
        body = urllib.request.urlopen(server.url, timeout=5).read().decode()
    finally:
        server.stop()
    assert "Inf" not in body and "NaN" not in body
    metrics = {family.name: family.samples for family in text_string_to_metric_families(body)}
    assert [s.value for s in metrics["gpumix_rank_comm_share"]] == [0.5]
    assert metrics["gpumix_rank_step_time_seconds"] == [] and metrics["gpumix_tier_wait_share"] == []


def test_each_finding_is_a_series_by_its_id(demo_hub: Hub) -> None:
    metrics = scrape(demo_hub)
    series = {(s.labels["id"], s.labels["gpus"]): s for s in metrics["gpumix_finding"]}
    findings = demo_hub.snapshot()["findings"]
    assert len(series) == len({(f["id"], ",".join(map(str, f["gpus"]))) for f in findings}) > 0
    narrow = series[("narrow-link", "2")]
    assert narrow.value == 1.0 and narrow.labels["severity"] == "warning" and narrow.labels["Hostname"] == "rig01"


def test_a_field_finding_reaches_prometheus(demo_hub: Hub) -> None:
    from gpumix.hub.ranks import parse_hello

    uuid = demo_hub.snapshot()["gpus"][3]["uuid"]
    key = demo_hub.agent_hello(parse_hello({"rank": 0, "world_size": 1, "job": "fp32", "gpu_uuid": uuid}))
    for step in range(3):
        demo_hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.3, "amp_autocast": 0,
                                             "amp_dtype": "float32"}))
    (sample,) = [s for s in scrape(demo_hub)["gpumix_finding"] if s.labels["id"] == "fp32-on-tensor-cores"]
    assert sample.labels["gpus"] == "3" and sample.labels["severity"] == "info"


def test_a_carried_pcie_rate_says_its_age(demo_hub: Hub, clock: ManualClock) -> None:
    """No dashboard views this hub: its busy GPUs' rates are carried between slow reads, and a scraper
    reads how old each is beside the throughput (issue 13)."""
    for _ in range(8):
        clock.advance(1.0)
        demo_hub.tick()
    gpus = {str(gpu["index"]): gpu["pcie_rates_age_s"] for gpu in demo_hub.snapshot()["gpus"]}
    assert max(gpus.values()) > 1.0  # carried, not read this tick
    ages = {s.labels["gpu"]: s.value for s in scrape(demo_hub)["gpumix_pcie_rates_age_seconds"]}
    assert ages == pytest.approx(gpus)
