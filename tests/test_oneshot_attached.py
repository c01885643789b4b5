"""One-shots attached to a running hub load only the client (issue 13: <= 0.15 s with a hub).

`gpumix doctor`, `gpumix power show` and `gpumix-top --once --json` run against a real `gpumix hub
--sim mixed-10` in a fresh interpreter, which then lists what it imported: none of the modules below may
be there. Each is what some other path needs and an attached one-shot does not: the hub itself, its
merge and server, the advisor and the power fit (the hub already ran the advisor: its findings are in
the snapshot), the planner, NVML, the simulated world, the recorder and SQLite, the TUI's Textual and
Rich, torch and numpy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from gpumix.advice.advisor import AdvisorSettings, findings
from gpumix.cli.doctor import hub_findings, run_doctor
from gpumix.cli.hardware import simulated_hardware
from gpumix.cli.main import build_parser
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.sim.rig import load_builtin_rig
from tests.waiting import wait_until

HEAVY = {
    "gpumix.hub.core", "gpumix.hub.merge", "gpumix.hub.server", "gpumix.hub.intake",
    "gpumix.advice.advisor", "gpumix.advice.field", "gpumix.power.budget", "gpumix.power.supplies",
    "gpumix.plan.planner", "gpumix.plan.inputs", "gpumix.hw.nvml_backend", "gpumix.hw.hardware",
    "gpumix.sim.rig", "gpumix.sim.machine", "gpumix.record.recorder", "sqlite3", "pynvml",
    "textual", "rich", "torch", "numpy",
    "asyncio", "gpumix.hub.connections", "gpumix.hub.multi", "gpumix.hub.ranks",  # the hub's event loop: asking whether a hub answers needs a socket only
}
# `gpumix COMMAND` builds only that command's parser: the other commands' modules stay unloaded
OTHER_COMMANDS = {"gpumix.cli.hub_command", "gpumix.cli.run_command", "gpumix.cli.probe", "gpumix.cli.plan",
                  "gpumix.cli.recording", "gpumix.cli.remote"}
RUN_AND_LIST = ("import json, sys\nfrom {module} import main\ncode = main({argv!r})\n"
                "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\nsys.exit(code)")


@pytest.fixture
def running_hub() -> Iterator[dict[str, str]]:
    """`gpumix hub --sim mixed-10` on the default socket of a runtime dir of the test's own (short: a
    socket path has at most 107 bytes)."""
    runtime = tempfile.mkdtemp(prefix="gpumix-attached-", dir="/tmp")
    env = {**os.environ, "XDG_RUNTIME_DIR": runtime}
    env.pop("GPUMIX_HUB", None)
    env.pop("GPUMIX_4090_P2P_MIN_DRIVER", None)
    hub = subprocess.Popen([sys.executable, "-m", "gpumix.cli.main", "hub", "--sim", "mixed-10", "--interval", "0.2"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    try:
        assert "listening on" in hub.stdout.readline(), hub.stderr.read() if hub.poll() is not None else ""
        yield env
    finally:
        hub.terminate()
        hub.wait(30)
        shutil.rmtree(runtime, ignore_errors=True)


def attached(module: str, argv: list[str], env: dict[str, str]) -> tuple[int, str, set[str]]:
    """Exit code, stdout and the modules loaded by `module`'s main(argv) in a fresh interpreter."""
    code = RUN_AND_LIST.format(module=module, argv=argv)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd="/")
    lines = result.stderr.strip().splitlines()
    assert lines and "using the running hub" in lines[0], result.stderr[-500:]
    return result.returncode, result.stdout, set(json.loads(lines[-1]))


@pytest.mark.parametrize(("module", "argv"), [
    ("gpumix.cli.main", ["doctor"]), ("gpumix.cli.main", ["doctor", "--json"]),
    ("gpumix.cli.main", ["power", "show"]), ("gpumix.cli.main", ["power", "show", "--json"]),
    ("gpumix.tui.main", ["--once", "--json"]),
])
def test_an_attached_one_shot_loads_no_heavy_module(running_hub: dict[str, str], module: str, argv: list[str]) -> None:
    code, out, loaded = attached(module, argv, running_hub)
    assert code in (0, 1) and out.strip()  # doctor: 1, the rig's warnings
    assert "gpumix.hub.client" in loaded  # what it does use
    heavy = {name for name in loaded if name in HEAVY or name.split(".")[0] in HEAVY}
    assert not heavy, sorted(heavy)
    if module == "gpumix.cli.main":
        assert not OTHER_COMMANDS & loaded, sorted(OTHER_COMMANDS & loaded)


def test_an_attached_once_shows_busy_gpus_pcie_read_now_not_carried(running_hub: dict[str, str]) -> None:
    """No dashboard views this hub, so it carries busy GPUs' PCIe rates between slow reads (up to 30 s):
    `--once` asks for them fresh, and the hub reads them for it (issue 13)."""
    plain = HubClient(os.path.join(running_hub["XDG_RUNTIME_DIR"], "gpumix", "hub.sock"))

    def carried() -> bool:  # the hub's own snapshot: a busy GPU's rates more than a tick (0.2 s) old
        return any((gpu["util_gpu_pct"] or 0) > 0 and (gpu["pcie_rates_age_s"] or 0) > 0.2
                   for gpu in (plain.snapshot() or {}).get("gpus") or [])

    wait_until(carried, 30, what="busy GPUs' rates carried")
    plain.close()
    code, out, _ = attached("gpumix.tui.main", ["--once", "--json"], running_hub)
    assert code == 0
    busy = [gpu for gpu in json.loads(out)["gpus"] if (gpu["util_gpu_pct"] or 0) > 0]
    assert busy
    # read for it (0), or, where the hub's own slow read came just before, at most a tick (0.2 s) old
    assert all(gpu["pcie_rates_age_s"] <= 0.2 for gpu in busy), [gpu["pcie_rates_age_s"] for gpu in busy]


def test_attached_doctor_with_a_setting_of_its_own_runs_the_advisor_itself(running_hub: dict[str, str]) -> None:
    """The hub's findings use the hub's budget; --power-budget is doctor's own, so it runs the advisor."""
    code, out, loaded = attached("gpumix.cli.main", ["doctor", "--json", "--power-budget", "1000"], running_hub)
    assert "gpumix.advice.advisor" in loaded
    evidence = [finding["evidence"] for finding in json.loads(out)["findings"]]
    assert any("against a 1000 W budget" in line for line in evidence), evidence
    env = {**running_hub, "GPUMIX_4090_P2P_MIN_DRIVER": "999.1"}  # the hub's environment lacks it
    assert "gpumix.advice.advisor" in attached("gpumix.cli.main", ["doctor"], env)[2]


def test_doctor_prints_what_the_advisor_says_of_the_same_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    """The snapshot's findings are the advisor's on that snapshot with doctor's default settings."""
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")))
    hub.tick()
    hub.tick()  # rates: differences of two readings
    snapshot = hub.snapshot()
    settings = AdvisorSettings(power_budget_w=snapshot["power_budget_w"])
    expected = [finding.to_json() for finding in findings(snapshot, settings)]
    assert expected  # mixed-10: refused P2P, caps over the budget
    for argv, shown in ((["doctor", "--json"], "json"), (["doctor"], "text")):
        code = run_doctor(build_parser().parse_args(argv), hub)
        out = capsys.readouterr().out
        if shown == "json":
            assert json.loads(out) == {"exit_code": code, "findings": expected}
        else:
            assert out.splitlines()[0] == f"[{expected[0]['severity']}] {expected[0]['title']}"
    hub.stop()


GOOD = {"id": "x", "severity": "warning", "title": "t", "evidence": "e", "fix": "f", "gpus": [0, 1]}


@pytest.mark.parametrize("listed", [
    None, "findings", {"x": GOOD}, [GOOD, 3], [{**GOOD, "severity": "fatal"}], [{**GOOD, "title": 7}],
    [{**GOOD, "gpus": [True]}], [{**GOOD, "gpus": "0"}], [{**GOOD, "extra": 1}],
    [{key: value for key, value in GOOD.items() if key != "fix"}],
])
def test_findings_a_hub_did_not_make_are_not_printed_as_its_own(listed: object) -> None:
    """An older or foreign hub's findings: None, and doctor runs the advisor on the snapshot instead."""
    assert hub_findings({"findings": listed}) is None  # type: ignore[typeddict-item]


def test_well_formed_findings_are_taken_as_they_are() -> None:
    found = hub_findings({"findings": [GOOD]})  # type: ignore[typeddict-item]
    assert found is not None and [finding.to_json() for finding in found] == [GOOD]
