"""Power caps against the simulator: set, reset, refusals before NVML, NVML errors explained, the audit log,
the hub's all-or-nothing power controls, and the round trip over the hub's socket."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.controls import power_control
from gpumix.hub.server import HubServer
from gpumix.hw.hardware import Hardware
from gpumix.hw.nvml_backend import NvmlBackend
from gpumix.power.caps import PowerController, PowerError, audit_log_path
from gpumix.sim.machine import SimMachine
from gpumix.sim.nvml import SimHandle, SimNvml
from gpumix.sim.rig import load_builtin_rig
from gpumix.wire.auth import uid_label
from tests.conftest import ManualClock, ticked_hub

SET = "nvmlDeviceSetPowerManagementLimit"
DEFAULT_CAPS = [170.0] * 3 + [350.0] * 3 + [390.0] + [450.0] * 3  # mixed-10's stock caps


class CountingNvml(SimNvml):
    """The simulator, counting the calls that would change a real card."""

    def __init__(self, machine: SimMachine) -> None:
        super().__init__(machine)
        self.set_calls: list[tuple[int, int]] = []

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimHandle, limit_mw: int) -> None:
        self.set_calls.append((handle.index, limit_mw))
        super().nvmlDeviceSetPowerManagementLimit(handle, limit_mw)


@pytest.fixture
def machine(clock: ManualClock) -> SimMachine:
    return SimMachine(load_builtin_rig("mixed-10"), clock=clock)


@pytest.fixture
def nvml(machine: SimMachine) -> CountingNvml:
    return CountingNvml(machine)


@pytest.fixture
def hardware(machine: SimMachine, nvml: CountingNvml, clock: ManualClock) -> Hardware:
    backend = NvmlBackend(nvml=nvml, clock=clock, wall_clock=lambda: 1_764_500_000.0 + clock())
    return Hardware(backend=backend, source="sim:mixed-10", machine=machine, power_budget_w=machine.rig.power_budget_w)


@pytest.fixture
def controller(hardware: Hardware) -> PowerController:
    return PowerController(hardware.backend, user="tester")


def audit_lines() -> list[dict[str, Any]]:
    path = audit_log_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def caps(machine: SimMachine) -> list[float]:
    return [gpu.power_cap_w for gpu in machine.gpus]


def assert_unchanged(machine: SimMachine, nvml: CountingNvml) -> None:
    assert caps(machine) == DEFAULT_CAPS
    assert nvml.set_calls == []
    assert audit_lines() == []


# -- PowerController ------------------------------------------------------------------------


def test_audit_log_is_under_the_private_state_dir() -> None:
    assert str(audit_log_path()).startswith(os.environ["XDG_STATE_HOME"])
    assert audit_log_path().name == "power-audit.jsonl"


def test_set_within_range_changes_the_card_and_writes_one_audit_line(
        hardware: Hardware, controller: PowerController, machine: SimMachine, nvml: CountingNvml,
        clock: ManualClock) -> None:
    hub = ticked_hub(hardware, clock, ticks=1)
    assert hub.snapshot()["gpus"][7]["power_cap_w"] == 450.0
    change = controller.set_cap(7, 300)
    assert (change.gpu_index, change.old_w, change.new_w, change.dry_run) == (7, 450.0, 300.0, False)
    assert nvml.set_calls == [(7, 300_000)]
    assert machine.gpus[7].power_cap_w == 300.0
    assert hardware.backend.power_limit_w(7) == 300.0
    assert hub.tick()["gpus"][7]["power_cap_w"] == 300.0  # the next snapshot, not a stale slow reading
    assert caps(machine)[:7] == DEFAULT_CAPS[:7] and caps(machine)[8:] == DEFAULT_CAPS[8:]
    lines = audit_lines()
    assert len(lines) == 1
    line = lines[0]
    assert {"time_s", "user", "gpu_uuid", "old_w", "new_w"} <= set(line)
    assert line["user"] == "tester" and line["gpu_uuid"] == machine.rig.gpus[7].uuid
    assert (line["old_w"], line["new_w"], line["dry_run"]) == (450.0, 300.0, False)
    assert abs(line["time_s"] - time.time()) < 60


def test_each_applied_change_appends_a_line(controller: PowerController) -> None:
    controller.set_cap(0, 150)
    controller.set_cap(0, 120, user="alice")
    lines = audit_lines()
    assert [(line["old_w"], line["new_w"], line["user"]) for line in lines] == [(170.0, 150.0, "tester"),
                                                                                (150.0, 120.0, "alice")]


@pytest.mark.parametrize(("index", "watts", "range_text"), [
    (7, 149, "150–600 W"), (7, 601, "150–600 W"), (7, 700, "150–600 W"), (0, 99.5, "100–200 W"), (0, 201, "100–200 W"),
    (7, -5, "150–600 W"),
])
def test_out_of_range_is_refused_before_nvml(controller: PowerController, machine: SimMachine, nvml: CountingNvml,
                                             index: int, watts: float, range_text: str) -> None:
    with pytest.raises(PowerError) as refused:
        controller.set_cap(index, watts)
    message = str(refused.value)
    assert range_text in message and f"GPU {index}" in message and "\n" not in message
    assert_unchanged(machine, nvml)


def test_range_edges_are_accepted(controller: PowerController, machine: SimMachine) -> None:
    controller.set_cap(7, 150)
    controller.set_cap(8, 600)
    assert caps(machine)[7:9] == [150.0, 600.0]


def test_no_permission_names_root_cap_sys_admin_and_the_privileged_hub(
        controller: PowerController, machine: SimMachine, nvml: CountingNvml) -> None:
    machine.faults[(7, SET)] = pynvml.NVML_ERROR_NO_PERMISSION
    with pytest.raises(PowerError) as refused:
        controller.set_cap(7, 300)
    message = str(refused.value)
    assert "root" in message and "CAP_SYS_ADMIN" in message and "hub" in message and "sudo gpumix hub" in message
    assert "\n" not in message
    assert caps(machine) == DEFAULT_CAPS and audit_lines() == []


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_not_supported_says_the_card_does_not_allow_it(controller: PowerController, machine: SimMachine,
                                                       code: int) -> None:
    machine.faults[(3, SET)] = code
    with pytest.raises(PowerError, match="does not allow"):
        controller.set_cap(3, 300)
    assert caps(machine) == DEFAULT_CAPS and audit_lines() == []


def test_other_nvml_errors_are_one_line(controller: PowerController, machine: SimMachine) -> None:
    machine.faults[(3, SET)] = pynvml.NVML_ERROR_UNKNOWN
    with pytest.raises(PowerError, match="NVML refused the cap") as refused:
        controller.set_cap(3, 300)
    assert "\n" not in str(refused.value)
    assert caps(machine) == DEFAULT_CAPS and audit_lines() == []


def test_lost_gpu_is_refused(controller: PowerController, machine: SimMachine, nvml: CountingNvml) -> None:
    machine.lost.add(4)
    with pytest.raises(PowerError, match="GPU 4 is lost"):
        controller.set_cap(4, 300)
    assert caps(machine) == DEFAULT_CAPS and audit_lines() == []
    with pytest.raises(PowerError, match="lost"):  # and again, now the backend knows
        controller.reset_cap(4)
    assert nvml.set_calls == []


def test_reset_goes_back_to_the_default(controller: PowerController, machine: SimMachine) -> None:
    controller.set_cap(9, 200)
    change = controller.reset_cap(9)
    assert (change.old_w, change.new_w) == (200.0, 450.0)
    assert machine.gpus[9].power_cap_w == 450.0
    assert [(line["old_w"], line["new_w"]) for line in audit_lines()] == [(450.0, 200.0), (200.0, 450.0)]


def test_dry_run_changes_nothing_and_logs_nothing(controller: PowerController, machine: SimMachine,
                                                  nvml: CountingNvml) -> None:
    change = controller.set_cap(7, 300, dry_run=True)
    assert (change.old_w, change.new_w, change.dry_run) == (450.0, 300.0, True)
    reset = controller.reset_cap(0, dry_run=True)
    assert (reset.old_w, reset.new_w, reset.dry_run) == (170.0, 170.0, True)
    assert_unchanged(machine, nvml)
    with pytest.raises(PowerError):  # a dry run still checks the range
        controller.set_cap(7, 700, dry_run=True)


@pytest.mark.parametrize("index", [10, 12, -1])
def test_unknown_gpu_index_is_one_line(controller: PowerController, machine: SimMachine, nvml: CountingNvml,
                                       index: int) -> None:
    with pytest.raises(PowerError) as refused:
        controller.set_cap(index, 300)
    message = str(refused.value)
    assert f"no GPU {index}" in message and "0–9" in message and "\n" not in message
    with pytest.raises(PowerError, match=f"no GPU {index}"):
        controller.reset_cap(index)
    assert_unchanged(machine, nvml)


def test_unwritable_audit_log_does_not_undo_the_cap_but_says_so(hardware: Hardware, machine: SimMachine,
                                                                 tmp_path: Path, clock: ManualClock) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    controller = PowerController(hardware.backend, audit_path=blocker / "sub" / "log.jsonl")
    change = controller.set_cap(7, 300)
    assert machine.gpus[7].power_cap_w == 300.0
    assert change.audit_error is not None and str(blocker) in change.audit_error
    assert "audit_error" not in change.to_json()
    hub = ticked_hub(hardware, clock)
    hub.power = controller
    reply = hub.control({"type": "power", "action": "set", "gpus": [6], "watts": 300})
    assert reply["ok"] and machine.gpus[6].power_cap_w == 300.0  # applied, and the reply says the rest
    assert "the audit log could not be written" in reply["message"] and str(blocker) in reply["audit_error"]
    assert "audit_error" not in reply["changes"][0]


# -- power_control: the hub's requests ------------------------------------------------------


@pytest.fixture
def hub(hardware: Hardware, clock: ManualClock) -> Hub:
    return ticked_hub(hardware, clock)


def control(hub: Hub, **request: Any) -> dict[str, Any]:
    return power_control(hub.power, hub.snapshot(), {"type": "power", **request}, hub.hardware.power_budget_w)


def test_set_several_gpus(hub: Hub, machine: SimMachine) -> None:
    reply = control(hub, action="set", gpus=[3, 4, 5], watts=300)
    assert reply["ok"] and reply["type"] == "power_result"
    assert [c["gpu_index"] for c in reply["changes"]] == [3, 4, 5]
    assert caps(machine)[3:6] == [300.0] * 3
    assert "GPU 3 350→300 W" in reply["message"]
    assert len(audit_lines()) == 3


def test_multi_gpu_set_with_one_target_out_of_range_changes_none(hub: Hub, machine: SimMachine,
                                                                 nvml: CountingNvml) -> None:
    # 210 W suits the 3090 and the 4090 but is above a 3060's 200 W: the last target spoils the request.
    reply = control(hub, action="set", gpus=[3, 7, 0], watts=210)
    assert not reply["ok"] and reply["changes"] == []
    assert "GPU 0" in reply["message"] and "100–200 W" in reply["message"]
    reply = control(hub, action="set", gpus=[0, 3, 9], watts=120)  # below the last target's 150 W
    assert not reply["ok"] and "150–600 W" in reply["message"]
    assert_unchanged(machine, nvml)


def test_multi_gpu_set_with_an_unknown_target_changes_none(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    reply = control(hub, action="set", gpus=[3, 42], watts=300)
    assert not reply["ok"] and "no GPU 42" in reply["message"]
    assert_unchanged(machine, nvml)


def test_reset_several(hub: Hub, machine: SimMachine) -> None:
    assert control(hub, action="set", gpus=[7, 8], watts=300)["ok"]
    reply = control(hub, action="reset", gpus=[7, 8])
    assert reply["ok"] and caps(machine) == DEFAULT_CAPS


def test_set_dry_run(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    reply = control(hub, action="set", gpus=[7, 8], watts=300, dry_run=True)
    assert reply["ok"] and reply["message"].startswith("would set")
    assert [c["dry_run"] for c in reply["changes"]] == [True, True]
    assert_unchanged(machine, nvml)


def test_caps_action_sets_exact_caps(hub: Hub, machine: SimMachine) -> None:
    reply = control(hub, action="caps", caps={"7": 400, "9": 350.5, "0": 150})
    assert reply["ok"]
    assert caps(machine)[7] == 400.0 and caps(machine)[9] == 350.5 and caps(machine)[0] == 150.0
    assert len(audit_lines()) == 3


def test_caps_action_is_all_or_nothing(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    reply = control(hub, action="caps", caps={"7": 400, "0": 250})
    assert not reply["ok"] and "GPU 0" in reply["message"]
    for bad in ({}, {"x": 300}, {"7": "300"}, {"7": True}, [300], None):
        reply = control(hub, action="caps", caps=bad)
        assert not reply["ok"] and reply["message"] == "caps must map GPU indices to watts", bad
    assert_unchanged(machine, nvml)


def test_fit_dry_run_proposes_and_changes_nothing(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    reply = control(hub, action="fit", dry_run=True)
    assert reply["ok"] and reply["changes"] == []
    assert "proposal only" in reply["message"]
    fit = reply["fit"]
    assert fit["budget_w"] == 2800 and fit["caps_before_w"] == 3300
    assert fit["caps_after_w"] <= 2800 + 1e-6
    assert len(fit["gpus"]) == 10
    assert_unchanged(machine, nvml)


def test_fit_applies_under_the_budget(hub: Hub, machine: SimMachine) -> None:
    reply = control(hub, action="fit")
    assert reply["ok"] and "applied" in reply["message"]
    assert sum(caps(machine)) <= 2800 + 1e-6
    for gpu, cap in zip(machine.gpus, caps(machine), strict=True):
        assert gpu.spec.model.power_limit_min_w <= cap <= gpu.spec.model.power_limit_max_w
    changed = [c["gpu_index"] for c in reply["changes"]]
    assert changed and len(audit_lines()) == len(changed)
    assert control(hub, action="fit", budget_w=3000, dry_run=True)["fit"]["budget_w"] == 3000


def test_fit_budget_errors(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    reply = control(hub, action="fit", budget_w=500)
    assert not reply["ok"] and "below the sum of the cards' minimum caps (1150 W)" in reply["message"]
    no_budget = power_control(hub.power, hub.snapshot(), {"action": "fit"}, None)
    assert not no_budget["ok"] and "budget" in no_budget["message"]
    not_yet = power_control(hub.power, None, {"action": "fit"}, 2800)
    assert not not_yet["ok"] and "no reading yet" in not_yet["message"]
    assert_unchanged(machine, nvml)


@pytest.mark.parametrize(("request_", "fragment"), [
    ({"action": "explode", "gpus": [0], "watts": 150}, "unknown power action 'explode'"),
    ({"gpus": [0], "watts": 150}, "unknown power action None"),
    ({"action": "set", "gpus": [0], "watts": "150"}, "a cap in watts is needed"),
    ({"action": "set", "gpus": [0], "watts": True}, "a cap in watts is needed"),
    ({"action": "set", "gpus": [0]}, "a cap in watts is needed"),
    ({"action": "set", "gpus": ["0"], "watts": 150}, "name the GPUs by index"),
    ({"action": "set", "gpus": [0.0], "watts": 150}, "name the GPUs by index"),
    ({"action": "set", "gpus": [True], "watts": 150}, "name the GPUs by index"),
    ({"action": "set", "gpus": 0, "watts": 150}, "name the GPUs by index"),
    ({"action": "set", "gpus": [], "watts": 150}, "name the GPUs by index"),
    ({"action": "reset"}, "name the GPUs by index"),
    ({"action": "fit", "budget_w": "2800"}, "budget"),
])
def test_bad_requests_are_refused(hub: Hub, machine: SimMachine, nvml: CountingNvml, request_: dict[str, Any],
                                  fragment: str) -> None:
    reply = control(hub, **request_)
    assert reply == {"type": "power_result", "ok": False, "message": reply["message"], "changes": []}
    assert fragment in reply["message"]
    assert_unchanged(machine, nvml)


def test_hub_control_shows_the_new_cap_at_once(hub: Hub, machine: SimMachine) -> None:
    ticks = hub.ticks
    reply = hub.control({"type": "power", "action": "set", "gpus": [8], "watts": 320, "user": "bob"})
    assert reply["ok"] and hub.ticks == ticks + 1
    assert hub.snapshot()["gpus"][8]["power_cap_w"] == 320.0
    # in-process (the embedded hub): this process's user; what the request claims is kept apart
    assert (audit_lines()[0]["user"], audit_lines()[0]["claimed_user"]) == (hub.power.user, "bob")
    dry = hub.control({"type": "power", "action": "set", "gpus": [8], "watts": 300, "dry_run": True})
    assert dry["ok"] and hub.ticks == ticks + 1 and machine.gpus[8].power_cap_w == 320.0


# -- over the hub's socket ------------------------------------------------------------------


@pytest.fixture
def sock_path() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")  # Unix socket paths are short
    yield os.path.join(folder, "hub.sock")
    shutil.rmtree(folder, ignore_errors=True)


def test_power_round_trip_over_the_socket(hub: Hub, machine: SimMachine, sock_path: str) -> None:
    server = HubServer(hub, sock_path)
    server.start()
    client = HubClient(sock_path)
    try:
        reply = client.control({"type": "power", "action": "set", "gpus": [7], "watts": 300, "user": "carol"})
        assert reply["ok"], reply
        assert machine.gpus[7].power_cap_w == 300.0
        assert client.snapshot()["gpus"][7]["power_cap_w"] == 300.0
        refused = client.control({"type": "power", "action": "set", "gpus": [7], "watts": 700})
        assert not refused["ok"] and "150–600 W" in refused["message"]
        assert machine.gpus[7].power_cap_w == 300.0
        reset = client.control({"type": "power", "action": "reset", "gpus": [7]})
        assert reset["ok"] and machine.gpus[7].power_cap_w == 450.0
        # the audit names the peer's uid as the kernel says it, not the user the client claims
        first = audit_lines()[0]
        assert (first["user"], first["claimed_user"], first["new_w"]) == (uid_label(os.getuid()), "carol", 300.0)
        assert "claimed_user" not in audit_lines()[1]
        assert len(audit_lines()) == 2
    finally:
        client.close()
        server.stop()
    gone = HubClient(sock_path, timeout_s=0.5).control({"type": "power", "action": "reset", "gpus": [7]})
    assert not gone["ok"] and "no hub answered" in gone["message"]


def test_the_audit_names_the_peer_not_the_user_it_claims(hub: Hub, machine: SimMachine, sock_path: str) -> None:
    from tests.test_remote_auth import TOKEN

    server = HubServer(hub, sock_path, tcp=("127.0.0.1", 0), token=TOKEN)
    server.start()
    try:
        local = HubClient(sock_path)
        claim = {"type": "power", "action": "set", "gpus": [7], "watts": 300, "user": "alice (not me)"}
        assert local.control(claim)["ok"]
        remote = HubClient(f"tcp://127.0.0.1:{server.tcp_port}", token=TOKEN)
        assert remote.control({**claim, "watts": 310, "user": "root"})["ok"]
        local.close()
        remote.close()
    finally:
        server.stop()
    unix_line, tcp_line = audit_lines()
    assert unix_line["user"] == uid_label(os.getuid()) == f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    assert unix_line["claimed_user"] == "alice (not me)"
    assert tcp_line["user"].startswith("token@127.0.0.1:") and tcp_line["claimed_user"] == "root"
    assert machine.gpus[7].power_cap_w == 310.0


def test_a_claimed_user_is_bounded(hub: Hub) -> None:
    reply = hub.control({"type": "power", "action": "set", "gpus": [8], "watts": 320, "user": "x" * 10_000},
                        peer="uid 4242")
    assert reply["ok"]
    line = audit_lines()[0]
    assert line["user"] == "uid 4242" and line["claimed_user"] == "x" * 64


def test_a_fit_is_refused_while_a_gpu_s_cap_does_not_read(hub: Hub, machine: SimMachine, nvml: CountingNvml) -> None:
    """A GPU whose cap did not read is out of the fit's sum: caps fitted to the other nine could draw past
    the budget with it, so the fit says why and changes nothing."""
    snapshot = hub.snapshot()
    snapshot["gpus"][4]["power_cap_w"] = None  # its power-management limit read failed this time
    reply = power_control(hub.power, snapshot, {"action": "fit"}, 2800)
    assert not reply["ok"] and reply["message"].startswith("GPU 4's power cap could not be read")
    snapshot["gpus"][4]["lost"] = True  # a GPU off the bus is not asked for
    assert power_control(hub.power, snapshot, {"action": "fit", "dry_run": True}, 2800)["ok"]
    # its limits, read once at the start, leave it out of the sum as well
    limits = hub.snapshot()
    limits["gpus"][6]["power_limit_min_w"] = None
    reply = power_control(hub.power, limits, {"action": "fit", "dry_run": True}, 2800)
    assert not reply["ok"] and reply["message"] == ("GPU 6's minimum power limit could not be read: the fit cannot"
                                                     " hold the budget without it")
    assert_unchanged(machine, nvml)
