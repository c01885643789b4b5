"""`gpumix hub --prometheus HOST:PORT`: /metrics for Prometheus, read from the hub at scrape time.

GPU metrics take dcgm-exporter's names, units and label names (gpu, UUID,
modelName, Hostname, plus our `tier`), so dashboards built for dcgm-exporter
work unchanged. Units as DCGM gives them: framebuffer in MiB, power in W,
clocks in MHz, PCIe throughput in KB/s (DCGM's DCGM_FI_DEV_PCIE_*_THROUGHPUT
fields are KB/s, NVML's unit for nvmlDeviceGetPcieThroughput; KB = 1024 bytes).
Training and tuning metrics are ours, named gpumix_*.

The endpoint carries no authentication: it listens on loopback unless
--prometheus-public is given.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpumix.wire.auth import (
    is_loopback,  # a host name counts as public: we cannot tell where it resolves
)
from gpumix.wire.jobs import job_label
from gpumix.wire.snapshot_types import Snapshot

DEFAULT_HOST = "127.0.0.1"
MIB = 1024**2
KIB = 1024
GPU_LABELS = ["gpu", "UUID", "modelName", "tier", "Hostname"]
RANK_LABELS = ["rank", "job", "Hostname"]
SEVERITIES = ("info", "warning", "error")
MAX_FINDING_SERIES = 256  # gpumix_finding series per scrape (a multi-node view merges many hubs' findings)
FINDING_LABEL_CHARS = 128

# (metric, help, snapshot key, scale) for the dcgm-exporter gauges
DCGM_GAUGES = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_gpu_pct", 1.0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "util_mem_pct", 1.0),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "mem_used_bytes", 1 / MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w", 1.0),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c", 1.0),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "clock_sm_mhz", 1.0),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "clock_mem_mhz", 1.0),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe TX throughput (in KB/s).", "pcie_tx_bytes_per_s", 1 / KIB),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe RX throughput (in KB/s).", "pcie_rx_bytes_per_s", 1 / KIB),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", "power_cap_w", 1.0),
)
RANK_GAUGES = (
    ("gpumix_rank_step_time_seconds", "Median step time of the rank over its last steps.", "step_time_s"),
    ("gpumix_rank_samples_per_second", "Samples per second of the rank.", "samples_per_s"),
    ("gpumix_rank_comm_share", "Share of the step the rank spends in communication (0-1).", "comm_share"),
    ("gpumix_rank_data_wait_share", "Share of the step the rank waits for data (0-1).", "data_wait_share"),
    ("gpumix_rank_straggler", "1 when the rank's compute holds the others back.", "straggler"),
)


class ListenError(ValueError):
    """A --prometheus address that cannot or must not be used; str() is one line."""


def parse_listen(text: str, public: bool = False) -> tuple[str, int]:
    """'9400' -> ('127.0.0.1', 9400); 'HOST:PORT'; '[::1]:9400'. Refuses non-loopback unless `public`."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or DEFAULT_HOST
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenError(f"--prometheus {text}: give a port, or HOST:PORT (e.g. 9400 or 127.0.0.1:9400)")
    if not public and not is_loopback(host):
        raise ListenError(f"--prometheus {text}: {host} is reachable from other machines and /metrics has no"
                          " authentication; listen on 127.0.0.1, or add --prometheus-public to allow it")
    return host, int(port_text)



def _add(family: GaugeMetricFamily, labels: list[str], value: Any) -> None:
    """One sample, if its value is a finite number: Prometheus would take +Inf or NaN, and every
    sum, rate and alert over the series would turn into it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if math.isfinite(value):
        family.add_metric(labels, float(value))


def _gpu_labels(gpu: dict[str, Any], hostname: str) -> list[str]:
    return [str(gpu["index"]), gpu["uuid"], gpu.get("name") or "", gpu.get("tier") or "", hostname]


class HubCollector(Collector):
    """Builds every metric from `source.snapshot()` when Prometheus scrapes."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def describe(self) -> list[Metric]:
        return []  # metrics appear with the hardware: don't collect at registration

    def collect(self) -> Iterator[Metric]:
        snapshot = self.source.snapshot()
        if snapshot is None:
            return
        hostname = snapshot.get("hostname") or ""
        gpus = [gpu for gpu in snapshot["gpus"] if not gpu.get("lost")]
        for name, help_text, key, scale in DCGM_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=GPU_LABELS)
            for gpu in gpus:
                if gpu.get(key) is not None:
                    _add(family, _gpu_labels(gpu, hostname), gpu[key] * scale)
            yield family
        free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=GPU_LABELS)
        for gpu in gpus:
            if gpu.get("mem_total_bytes") is not None and gpu.get("mem_used_bytes") is not None:
                _add(free, _gpu_labels(gpu, hostname), (gpu["mem_total_bytes"] - gpu["mem_used_bytes"]) / MIB)
        yield free
        # cumulative, but typed gauge: prometheus_client would append _total to a counter's name, and
        # dashboards for dcgm-exporter query the bare name (rate() works on either type)
        replay = GaugeMetricFamily("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries (cumulative).",
                                   labels=GPU_LABELS)
        for gpu in gpus:
            _add(replay, _gpu_labels(gpu, hostname), gpu.get("pcie_replay_count"))
        yield replay
        gen = GaugeMetricFamily("gpumix_pcie_link_gen", "Current PCIe link generation (drops at idle).", labels=GPU_LABELS)
        width = GaugeMetricFamily("gpumix_pcie_link_width", "Current PCIe link width (lanes).", labels=GPU_LABELS)
        share = GaugeMetricFamily("gpumix_pcie_link_share", "PCIe throughput as a share of the current link's rate (0-1).",
                                  labels=[*GPU_LABELS, "direction"])
        # a rate carried between reads (a quiet GPU's; a busy one's while no dashboard views the hub) says its age
        age = GaugeMetricFamily("gpumix_pcie_rates_age_seconds", "Age of the reading behind the PCIe throughput "
                                "(0: read this tick; up to 30 s where carried between reads).", labels=GPU_LABELS)
        for gpu in gpus:
            labels = _gpu_labels(gpu, hostname)
            _add(gen, labels, gpu.get("pcie_link_gen_current"))
            _add(width, labels, gpu.get("pcie_link_width_current"))
            for direction in ("rx", "tx"):
                _add(share, [*labels, direction], gpu.get(f"pcie_{direction}_link_share"))
            _add(age, labels, gpu.get("pcie_rates_age_s"))
        yield from (gen, width, share, age)
        yield from self._ranks(snapshot, hostname)
        wait = GaugeMetricFamily("gpumix_tier_wait_share", "Median share of each step a tier's ranks wait for the slowest (0-1).",
                                 labels=["tier", "Hostname"])
        for tier in snapshot.get("tiers") or []:
            _add(wait, [tier["tier"], hostname], tier.get("wait_share"))
        yield wait
        findings = GaugeMetricFamily("gpumix_findings", "Findings of the advisor now, by severity.", labels=["severity", "Hostname"])
        counts = dict.fromkeys(SEVERITIES, 0)
        for finding in snapshot.get("findings") or []:
            counts[finding.get("severity", "info")] = counts.get(finding.get("severity", "info"), 0) + 1
        for severity, count in counts.items():
            findings.add_metric([severity, hostname], count)
        yield findings
        yield self._each_finding(snapshot, hostname)
        budget = GaugeMetricFamily("gpumix_power_budget_watts", "The machine's GPU power budget (W).", labels=["Hostname"])
        _add(budget, [hostname], snapshot.get("power_budget_w"))
        yield budget

    @staticmethod
    def _each_finding(snapshot: Snapshot, hostname: str) -> Metric:
        """One series per finding present now (value 1), by its id: alerts and dashboards key on the id.
        Labels are the finding's own bounded strings; the same id on other GPUs is another series."""
        family = GaugeMetricFamily("gpumix_finding", "A finding of the advisor present now (1), by id.",
                                   labels=["id", "severity", "gpus", "Hostname"])
        seen = set()
        for finding in (snapshot.get("findings") or [])[:MAX_FINDING_SERIES]:
            gpus = finding.get("gpus") if isinstance(finding.get("gpus"), list) else []
            labels = (str(finding.get("id", ""))[:FINDING_LABEL_CHARS], str(finding.get("severity", "info"))[:16],
                      ",".join(str(g) for g in gpus[:64])[:FINDING_LABEL_CHARS], hostname)
            if labels not in seen:
                seen.add(labels)
                family.add_metric(list(labels), 1.0)
        return family

    def _ranks(self, snapshot: Snapshot, hostname: str) -> Iterator[Metric]:
        ranks = [r for r in snapshot.get("ranks") or [] if r.get("connected", True)]
        for name, help_text, key in RANK_GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=RANK_LABELS)
            for rank in ranks:
                # an unnamed script's job label is its run id: two such scripts are two series
                labels = [str(rank["rank"]), job_label(rank.get("job"), rank.get("run_id")), rank.get("hostname") or hostname]
                _add(family, labels, float(rank[key]) if isinstance(rank.get(key), bool) else rank.get(key))
            yield family


class MetricsServer:
    """The /metrics HTTP endpoint on its own thread."""

    def __init__(self, source: Any, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(HubCollector(source))
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        self.host = host
        self.port = self._server.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
