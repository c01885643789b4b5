"""NVLink between GPUs: read from NVML (links and the peer's PCI bus id), shown as NV<n>
the way `nvidia-smi topo -m` shows it, on the simulator's NVML look-alike."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpumix.advice.advisor import findings
from gpumix.cli.hardware import simulated_hardware
from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.hw.topology import topology_text
from gpumix.sim.machine import SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import RigError, parse_rig
from tests.conftest import ManualClock, ticked_hub

BRIDGED = """
name = "3090-bridged"
[[gpus]]
model = "rtx3090"
slot_width = 16
nvlink_peer = 1
[[gpus]]
model = "rtx3090"
slot_width = 16
nvlink_peer = 0
[[gpus]]
model = "rtx4090"
slot_width = 16
"""


def p2p(text: str) -> dict[tuple[int, int], dict]:
    hub = ticked_hub(simulated_hardware(parse_rig(text, "r.toml"), clock=ManualClock()), ManualClock())
    snapshot = hub.snapshot()
    return {(link["gpu_a"], link["gpu_b"]): link for link in snapshot["p2p"]}


def test_a_bridged_pair_reads_nv4_and_peer_to_peer() -> None:
    links = p2p(BRIDGED)
    assert links[(0, 1)]["topology"] == "NV4" and links[(0, 1)]["nvlinks"] == 4
    assert links[(0, 1)]["read"] == "OK"  # GeForce P2P runs over the bridge
    assert links[(0, 2)]["nvlinks"] == 0 and links[(0, 2)]["topology"] != "NV4"
    assert links[(0, 2)]["read"] == "GPU not supported"


def test_topology_text_and_no_finding_against_the_bridge() -> None:
    hub = ticked_hub(simulated_hardware(parse_rig(BRIDGED, "r.toml"), clock=ManualClock()), ManualClock())
    snapshot = hub.snapshot()
    assert "NV4" in topology_text(snapshot)
    assert "off-main-root" not in [f.id for f in findings(snapshot)]


def test_a_card_refusing_nvlink_calls_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    hardware = simulated_hardware(parse_rig(BRIDGED, "r.toml"), clock=ManualClock())
    hardware.machine.faults[(0, "nvmlDeviceGetNvLinkState")] = pynvml.NVML_ERROR_NO_PERMISSION
    hub = ticked_hub(hardware, ManualClock())
    links = {(link["gpu_a"], link["gpu_b"]): link for link in hub.snapshot()["p2p"]}
    assert links[(0, 1)]["nvlinks"] == 0  # GPU 0 could not tell; nothing breaks


@pytest.mark.parametrize(("change", "message"), [
    (("nvlink_peer = 1\n[[gpus]]\nmodel = \"rtx3090\"\nslot_width = 16\nnvlink_peer = 0",
      "nvlink_peer = 1\n[[gpus]]\nmodel = \"rtx3090\"\nslot_width = 16\nnvlink_peer = 2"), "must name 0 back"),
    (("nvlink_peer = 1\n", "nvlink_peer = 7\n"), "must be another GPU's index"),
    (("nvlink_peer = 1\n", "nvlink_peer = 0\n"), "must be another GPU's index"),
])
def test_bad_bridges_are_one_line_errors(change, message) -> None:
    with pytest.raises(RigError, match=message) as error:
        parse_rig(BRIDGED.replace(*change, 1), "r.toml")
    assert str(error.value).startswith("r.toml:") and "\n" not in str(error.value)


class SwitchBoard(SimNvml):
    """Two GPUs on NVSwitches, as the H200 pair measured (driver 580): each of 18 links reports
    the remote type SWITCH and the remote bus id FFFFFFFF:FF:FF.0; nvidia-smi topo -m says NV18.
    No NVSwitch exists here, so this look-alike answers those two calls."""

    def nvmlDeviceGetNvLinkState(self, handle: SimHandle, link: int) -> int:
        self._check(handle, "nvmlDeviceGetNvLinkState")
        if not 0 <= link < 18:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: SimHandle, link: int) -> int:
        self.nvmlDeviceGetNvLinkState(handle, link)
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: SimHandle, link: int) -> Any:
        self.nvmlDeviceGetNvLinkState(handle, link)
        return SimpleNamespace(busId=b"FFFFFFFF:FF:FF.0")


def test_gpus_on_nvswitches_read_nv18() -> None:
    rig = parse_rig(BRIDGED.replace("nvlink_peer = 1\n", "").replace("nvlink_peer = 0\n", ""), "r.toml")
    backend = NvmlBackend(nvml=SwitchBoard(SimMachine(rig, clock=ManualClock())), clock=ManualClock())
    links = {(link.gpu_a, link.gpu_b): link for link in backend.p2p()}
    assert links[(0, 1)].topology == "NV18" and links[(0, 1)].nvlinks == 18
    assert links[(1, 2)].nvlinks == 18
