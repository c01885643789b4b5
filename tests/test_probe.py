"""gpumix probe's logic against a fake CUDA layer (no GPU here) that behaves and fails as torch does:
copies move bytes, out of memory is torch's RuntimeError, a pair without P2P copies through the host,
and a planted corrupt P2P copy returns zeros (nccl-tests issue 117)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

from gpumix.cli.probe import print_report
from gpumix.hw.types import DriverInfo, GpuInfo, GpuProcess, GpuSample
from gpumix.probe import allreduce, store
from gpumix.probe.cuda import NoCudaError, TorchCuda
from gpumix.probe.measure import MIB
from gpumix.probe.probe import Nvml, ProbeOptions, exit_code, machine_facts, run_probe

GB = 1e9
GEN4_X16_BYTES_PER_S = 31.5e9


class OutOfMemoryError(RuntimeError):
    """What torch.cuda.OutOfMemoryError is: a RuntimeError with this text."""


class Buffer:
    """Bytes are kept for buffers up to 8 MiB (the patterns compared); larger ones count only."""

    def __init__(self, nbytes: int, device: int | None, pinned: bool) -> None:
        self.nbytes = nbytes
        self.data = bytearray(nbytes) if nbytes <= 8 * MIB else None
        self.device = device
        self.pinned = pinned


class FakeCuda:
    """Devices with a host link of `rates` bytes/s each (pageable at half), an optional shared
    uplink, peers that may access each other, and pairs whose P2P copies come back as zeros."""

    def __init__(self, uuids: list[str], rates: list[float], uplink: float | None = None,
                 peers: set[tuple[int, int]] | None = None, corrupt: set[tuple[int, int]] | None = None,
                 memory_bytes: int = 80 * 1024 * MIB) -> None:
        self.uuids, self.rates, self.uplink = uuids, rates, uplink
        self.peers = peers if peers is not None else set()
        self.corrupt = corrupt or set()
        self.memory_bytes = memory_bytes
        self.in_use = [0] * len(uuids)
        self.peak = [0] * len(uuids)
        self.copy_seconds = 0.0
        self.live: weakref.WeakSet[Buffer] = weakref.WeakSet()  # freed when the probe drops them

    def device_count(self) -> int:
        return len(self.uuids)

    def uuid(self, device: int) -> str | None:
        return self.uuids[device]

    def can_access_peer(self, device: int, peer: int) -> bool:
        return (device, peer) in self.peers

    def empty(self, nbytes: int, device: int | None, pinned: bool = False) -> Buffer:
        if device is not None:
            self.in_use[device] = sum(b.nbytes for b in self.live if b.device == device)
            if self.in_use[device] + nbytes > self.memory_bytes:
                raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes / MIB:.2f} MiB."
                                       f" GPU {device} has a total capacity of {self.memory_bytes / MIB:.0f} MiB")
            self.peak[device] = max(self.peak[device], self.in_use[device] + nbytes)
        buffer = Buffer(nbytes, device, pinned)
        self.live.add(buffer)
        return buffer

    def from_bytes(self, data: bytes, device: int | None, pinned: bool = False) -> Buffer:
        buffer = self.empty(len(data), device, pinned)
        buffer.data[:] = data
        return buffer

    def to_bytes(self, buffer: Buffer) -> bytes:
        assert buffer.data is not None
        return bytes(buffer.data)

    def timed_copies(self, copies: list[tuple[Buffer, Buffer]], repeats: int) -> float:
        per_device: dict[int, float] = {}
        host_bytes = 0
        for dst, src in copies:
            assert dst.nbytes == src.nbytes
            route = (src.device, dst.device)
            if dst.data is None or src.data is None:
                pass
            elif None not in route and route in self.corrupt and route in self.peers:
                dst.data[:] = bytes(src.nbytes)  # the planted fault: the P2P copy returns zeros
            else:
                dst.data[:] = src.data
            host = src if src.device is None else dst if dst.device is None else None
            device = dst.device if dst.device is not None else src.device
            rate = self.rates[device] * (0.5 if host is not None and not host.pinned else 1.0)
            per_device[device] = per_device.get(device, 0.0) + src.nbytes / rate
            host_bytes += src.nbytes if host is not None else 0
        seconds = max(per_device.values())
        if self.uplink and host_bytes:
            seconds = max(seconds, host_bytes / self.uplink)
        seconds = (seconds + 5e-6) * repeats  # a copy's fixed cost
        self.copy_seconds += seconds
        return seconds

    def release(self) -> None:
        pass


class FakeNvml:
    """NVML facts and samples as the hardware layer's records (no NVML without a GPU)."""

    def __init__(self, count: int, gen_now: int = 4, width_now: int = 16, busy: dict[int, int] | None = None,
                 name: str = "NVIDIA GeForce RTX 4090") -> None:
        self.count, self.gen_now, self.width_now, self.busy = count, gen_now, width_now, busy or {}
        self.name = name

    def gpus(self) -> list[GpuInfo]:
        return [GpuInfo(index=i, uuid=f"GPU-{i:08d}", name=self.name, brand="GeForce", pci_bus_id=f"0000:0{i}:00.0",
                        mem_total_bytes=24 * 1024 * MIB, power_limit_min_w=150, power_limit_max_w=450,
                        power_limit_default_w=450, pcie_gen_max_gpu=4, pcie_gen_max=4, pcie_width_max=16)
                for i in range(self.count)]

    def sample(self) -> list[GpuSample]:
        return [GpuSample(index=i, uuid=f"GPU-{i:08d}", timestamp_s=0.0, util_gpu_pct=0.0,
                          pcie_link_gen_current=self.gen_now, pcie_link_width_current=self.width_now,
                          processes=[GpuProcess(pid=self.busy[i], gpu_mem_bytes=MIB)] if i in self.busy else [])
                for i in range(self.count)]

    def driver_info(self) -> DriverInfo:
        return DriverInfo(driver_version="525.60.11", cuda_driver_version="12.0")

    def close(self) -> None:
        pass


def probe(nvml: FakeNvml, cuda: FakeCuda, lines: list[str] | None = None, **options: Any) -> dict[str, Any]:
    options.setdefault("allreduce", False)
    return run_probe(Nvml(nvml), lambda: cuda, ProbeOptions(**options),
                     say=(lines.append if lines is not None else lambda line: None))


def full_rate(count: int) -> list[float]:
    return [GEN4_X16_BYTES_PER_S * 0.85] * count


def codes(report: dict[str, Any]) -> list[str]:
    return [finding["code"] for finding in report["findings"]]


def test_a_planted_corrupt_p2p_copy_is_an_error_with_the_driver_and_the_fix() -> None:
    cuda = FakeCuda(["GPU-00000000", "GPU-00000001"], full_rate(2), peers={(0, 1), (1, 0)}, corrupt={(0, 1)})
    report = probe(FakeNvml(2), cuda)
    wrong = [f for f in report["findings"] if f["code"] == "p2p_copy_wrong"]
    assert len(wrong) == 1 and wrong[0]["severity"] == "error" and wrong[0]["gpus"] == [0, 1]
    assert "returned zeros" in wrong[0]["message"] and "driver 525.60.11" in wrong[0]["message"]
    assert "NCCL_P2P_DISABLE=1" in wrong[0]["fix"]
    forward, backward = report["pairs"][0]["directions"]
    assert forward["route"] == "p2p" and not forward["checks"]["direct"]["correct"]
    assert forward["checks"]["through_host"]["correct"] and backward["checks"]["direct"]["correct"]
    assert exit_code(report) == 2


def test_a_healthy_pair_reports_p2p_in_the_gpu_numbers_every_screen_shows() -> None:
    # CUDA orders devices by speed, NVML by bus: CUDA device 0 is NVML's GPU 1
    cuda = FakeCuda(["GPU-00000001", "GPU-00000000"], full_rate(2), peers={(0, 1), (1, 0)}, corrupt={(1, 0)})
    report = probe(FakeNvml(2), cuda)
    assert [gpu["gpu"] for gpu in report["gpus"]] == [0, 1]
    assert [gpu["cuda_device"] for gpu in report["gpus"]] == [1, 0]
    pair = report["pairs"][0]
    assert pair["gpus"] == [0, 1] and pair["p2p_access"] == {"0->1": True, "1->0": True}
    wrong = [f for f in report["findings"] if f["code"] == "p2p_copy_wrong"]
    assert [f["gpus"] for f in wrong] == [[0, 1]]  # CUDA's 1->0 is NVML's 0->1


def test_without_p2p_copies_go_through_the_host_and_nothing_is_wrong() -> None:
    cuda = FakeCuda(["GPU-00000000", "GPU-00000001"], full_rate(2), peers=set(), corrupt={(0, 1)})
    report = probe(FakeNvml(2), cuda)
    directions = report["pairs"][0]["directions"]
    assert [d["route"] for d in directions] == ["host", "host"]
    assert all(c["correct"] for d in directions for c in d["checks"].values())
    assert all(d["bytes_per_s"] > 0 and d["latency_s"] > 0 for d in directions)
    assert report["findings"] == [] and exit_code(report) == 0


def test_out_of_memory_skips_the_larger_sizes_and_stays_within_the_budget() -> None:
    cuda = FakeCuda(["GPU-00000000"], full_rate(1), memory_bytes=64 * MIB)
    report = probe(FakeNvml(1), cuda)
    gpu = report["gpus"][0]
    assert {c["size_bytes"] for c in gpu["copies"]} == {1 * MIB, 16 * MIB}
    assert gpu["notes"] == ["256 MiB: out of GPU or pinned memory, skipped"]

    small = FakeCuda(["GPU-00000000", "GPU-00000001"], full_rate(2), peers={(0, 1), (1, 0)})
    probe(FakeNvml(2), small, max_bytes_per_gpu=32 * MIB, time_limit_s=5.0)
    assert max(small.peak) <= 32 * MIB
    assert small.copy_seconds <= 5.0


def test_a_slow_link_and_a_link_below_its_class_are_flagged() -> None:
    cuda = FakeCuda(["GPU-00000000"], [GEN4_X16_BYTES_PER_S / 4 * 0.3])
    report = probe(FakeNvml(1, gen_now=4, width_now=4), cuda)
    assert codes(report) == ["link_below_class", "link_slow"]
    gpu = report["gpus"][0]
    assert gpu["link_now"] == "4x4" and gpu["link_max"] == "4x16"
    assert gpu["share_of_expected"] == pytest.approx(0.3 / 0.92, rel=0.05)
    assert exit_code(report) == 1


def test_a_healthy_link_is_not_flagged() -> None:
    report = probe(FakeNvml(1), FakeCuda(["GPU-00000000"], full_rate(1)))
    assert report["findings"] == []
    assert report["gpus"][0]["share_of_expected"] == pytest.approx(0.85 / 0.92, rel=0.05)


def test_gpus_sharing_an_uplink_are_flagged_all_at_once() -> None:
    shared = FakeCuda([f"GPU-{i:08d}" for i in range(3)], full_rate(3), uplink=GEN4_X16_BYTES_PER_S * 0.85)
    report = probe(FakeNvml(3), shared)
    assert report["together"]["share_of_sum"] == pytest.approx(1 / 3, rel=0.05)
    assert "shared_uplink" in codes(report)
    apart = probe(FakeNvml(3), FakeCuda([f"GPU-{i:08d}" for i in range(3)], full_rate(3)))
    assert apart["together"]["share_of_sum"] == pytest.approx(1.0, rel=0.05)
    assert "shared_uplink" not in codes(apart)


def test_a_gpu_another_process_uses_is_refused_unless_forced() -> None:
    opened: list[FakeCuda] = []

    def open_cuda() -> FakeCuda:
        opened.append(FakeCuda(["GPU-00000000"], full_rate(1)))
        return opened[-1]

    lines: list[str] = []
    report = run_probe(Nvml(FakeNvml(1, busy={0: 4242})), open_cuda, ProbeOptions(allreduce=False), say=lines.append)
    assert report["refused"] == [{"gpu": 0, "reason": "process 4242 uses it"}] and report["gpus"] == []
    assert not opened  # no CUDA context on a busy GPU
    assert lines == ["GPU 0 not probed: process 4242 uses it (--force probes it anyway)"]
    assert exit_code(report) == 1
    forced = run_probe(Nvml(FakeNvml(1, busy={0: 4242})), open_cuda, ProbeOptions(allreduce=False, force=True))
    assert forced["refused"] == [] and len(forced["gpus"]) == 1


def test_the_allreduce_floor_is_skipped_on_one_gpu_with_a_clear_line() -> None:
    lines: list[str] = []
    report = probe(FakeNvml(1), FakeCuda(["GPU-00000000"], full_rate(1)), lines, allreduce=True)
    assert report["allreduce"] == {"skipped": "needs at least 2 GPUs"}
    assert "all-reduce floor: skipped, it needs at least 2 GPUs" in lines


def test_nccl_transports_are_read_from_its_log() -> None:
    log = "\n".join([
        "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        "host:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM",
        "host:1:2 [0] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
        "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
        "host:1:2 [0] NCCL INFO via \x1b[31mP2P/IPC\x1b[0m",  # text from a log is data
    ])
    assert allreduce.transports_in(log) == ["P2P/CUMEM", "SHM/direct/direct", "NET/Socket/0"]
    assert allreduce.transports_in("via X\n" * 10_000 + "".join(f"via T{i}\n" for i in range(100)))[-1] == "T14"
    assert allreduce.bus_bytes_per_s(1_000_000, 0.001, 2) == pytest.approx(1e9)
    assert allreduce.bus_bytes_per_s(1_000_000, 0.001, 4) == pytest.approx(1.5e9)


def test_allreduce_findings_compare_with_and_without_p2p() -> None:
    slower = {"gpus": [0, 1], "runs": [
        {"p2p_disabled": False, "bus_bytes_per_s": 3 * GB, "transports": ["P2P/CUMEM"]},
        {"p2p_disabled": True, "bus_bytes_per_s": 9 * GB, "transports": ["SHM/direct/direct"]}]}
    assert [f["code"] for f in allreduce.allreduce_findings(slower)] == ["nccl_p2p_slower"]
    hung = {"gpus": [0, 1], "runs": [{"p2p_disabled": False, "error": "no result within 10 s (NCCL hung?)"},
                                     {"p2p_disabled": True, "bus_bytes_per_s": 9 * GB}]}
    assert [f["severity"] for f in allreduce.allreduce_findings(hung)] == ["error"]
    fine = {"gpus": [0, 1], "runs": [{"p2p_disabled": False, "bus_bytes_per_s": 20 * GB},
                                     {"p2p_disabled": True, "bus_bytes_per_s": 9 * GB}]}
    assert allreduce.allreduce_findings(fine) == []


def test_results_are_kept_per_machine_state_with_their_age(tmp_path: Path) -> None:
    report = probe(FakeNvml(1), FakeCuda(["GPU-00000000"], full_rate(1)))
    store.save(report, tmp_path)
    kept = store.load(report["machine"], tmp_path, now=report["measured_at"] + 7200)
    assert kept is not None and kept["age_s"] == pytest.approx(7200) and not kept["stale"]
    assert kept["gpus"][0]["best_h2d_bytes_per_s"] == report["gpus"][0]["best_h2d_bytes_per_s"]
    assert store.load(report["machine"], tmp_path, now=report["measured_at"] + 40 * 86400)["stale"]
    new_driver = {**report["machine"], "driver_version": "580.1"}
    assert store.load(new_driver, tmp_path) is None
    moved = {**report["machine"], "gpus": [{**report["machine"]["gpus"][0], "link_max": "4x8"}]}
    assert store.load(moved, tmp_path) is None
    path = next(tmp_path.glob("probe-*.json"))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    for damage in ("not json", "[1, 2]", '{"measured_at": "x"}'):
        path.write_text(damage)
        assert store.load(report["machine"], tmp_path) is None
    for number in range(store.MAX_FILES + 5):
        store.save({**report, "machine": {**report["machine"], "driver_version": str(number)}}, tmp_path)
    assert len(list(tmp_path.glob("probe-*.json"))) == store.MAX_FILES


def test_text_from_the_gpus_prints_as_data(capsys: pytest.CaptureFixture[str]) -> None:
    report = probe(FakeNvml(1, name="RTX\x1b[2J[red]4090"), FakeCuda(["GPU-00000000"], full_rate(1)))
    print_report(report, as_json=False)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "RTX\\x1b[2J[red]4090" in out
    print_report(report, as_json=True)
    assert json.loads(capsys.readouterr().out)["gpus"][0]["name"] == "RTX\x1b[2J[red]4090"


def test_without_torch_or_cuda_the_probe_says_so_in_one_line() -> None:
    with pytest.raises(NoCudaError) as raised:
        TorchCuda()  # this box has no GPU: torch is missing or sees no CUDA device
    assert "\n" not in str(raised.value)


def test_the_command_without_a_driver_is_one_line_and_exit_2() -> None:
    env = {**os.environ, "XDG_STATE_HOME": "/nonexistent"}
    result = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "probe"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gpumix probe: ")
    bad = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "probe", "--gpus", "x"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "0,2" in bad.stderr


def test_the_allreduce_floor_runs_with_and_without_p2p_within_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[int], int, bool, float]] = []

    def measure(devices: list[int], nbytes: int, p2p_disabled: bool, timeout_s: float) -> dict[str, Any]:
        calls.append((devices, nbytes, p2p_disabled, timeout_s))  # the worker processes need NCCL and 2 GPUs
        return {"p2p_disabled": p2p_disabled, "size_bytes": nbytes, "transports": ["SHM/direct/direct"],
                "bus_bytes_per_s": (9 if p2p_disabled else 2) * GB}

    monkeypatch.setattr(allreduce, "measure", measure)
    cuda = FakeCuda(["GPU-00000001", "GPU-00000000"], full_rate(2), peers={(0, 1), (1, 0)})
    report = probe(FakeNvml(2), cuda, allreduce=True, allreduce_bytes=1024 * MIB, max_bytes_per_gpu=64 * MIB)
    assert [(devices, nbytes, disabled) for devices, nbytes, disabled, _ in calls] == [
        ([1, 0], 32 * MIB, False), ([1, 0], 32 * MIB, True)]
    assert sum(timeout for *_, timeout in calls) <= 30.0
    assert report["allreduce"]["gpus"] == [0, 1] and "nccl_p2p_slower" in codes(report)
    assert report["duration_s"] >= 0


def test_an_allreduce_worker_that_fails_is_one_line_not_a_hang() -> None:
    # real worker processes: without torch (or without a GPU, where torch is installed) they fail
    result = allreduce.measure([0, 1], 1024, p2p_disabled=True, timeout_s=60.0)
    assert result["p2p_disabled"] is True and result["transports"] == []
    assert result["error"].startswith("a worker failed: ") and "\n" not in result["error"]


def test_the_allreduce_workers_measure_for_real_over_gloo() -> None:
    # the same worker processes, rendezvous and result parsing as with NCCL, on the CPU
    result = allreduce.measure([0, 1], 1 * MIB, p2p_disabled=False, timeout_s=60.0, backend="gloo")
    assert "error" not in result, result
    assert result["correct"] is True and result["size_bytes"] == MIB
    assert result["bus_bytes_per_s"] == pytest.approx(MIB / result["seconds_per_op"])  # 2(n-1)/n = 1 for 2
    assert result["transports"] == []  # gloo writes no NCCL log


def test_a_hub_can_find_the_kept_result_from_its_own_facts(tmp_path: Path) -> None:
    nvml = FakeNvml(2)
    report = probe(nvml, FakeCuda(["GPU-00000000", "GPU-00000001"], full_rate(2), peers={(0, 1), (1, 0)}))
    store.save(report, tmp_path)
    kept = store.load(machine_facts(nvml.gpus(), nvml.driver_info().driver_version), tmp_path)
    assert kept is not None and kept["pairs"] == report["pairs"]
