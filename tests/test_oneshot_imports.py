"""The one-shot commands on real GPUs import no more than they use (issue 13: `gpumix-top --once`
and `gpumix doctor` took 0.86 s on an H200 against gpustat's 0.17 s). What a fresh interpreter
has imported after loading each entry point is checked; the simulated machine is for --demo and
--sim only, and Textual for the interactive monitor only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SIMULATED_WORLD = {"gpumix.sim.machine", "gpumix.sim.nvml", "gpumix.sim.world", "gpumix.sim.job_model"}


def modules_after_import(module: str) -> set[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("entry", ["gpumix.tui.main", "gpumix.cli.main"])
def test_entry_points_leave_the_simulated_world_unloaded(entry: str) -> None:
    loaded = modules_after_import(entry)
    assert not SIMULATED_WORLD & loaded, sorted(SIMULATED_WORLD & loaded)
    assert not {name for name in loaded if name == "textual" or name.startswith("textual.")}


def test_the_simulated_rig_still_loads_when_asked_for() -> None:
    code = ("import sys; from gpumix.cli.hardware import open_hardware; h = open_hardware(demo=True);"
            " print(len(h.backend.gpus()), 'gpumix.sim.machine' in sys.modules, h.power_layout is not None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert result.stdout.split() == ["10", "True", "True"]  # mixed-10 and its supplies


def test_gpumix_top_loads_no_hub_nor_nvml_before_it_knows_it_needs_them() -> None:
    """`gpumix-top --once` attached to a running hub reads its snapshot through the client: the hub
    itself, NVML and the advisor load only when gpumix-top starts a hub of its own (issue 13: with a
    hub running, 0.23 of the one-shot's 0.24 s on the H200 was importing, 0.12 s of it gpumix.hub.core)."""
    loaded = modules_after_import("gpumix.tui.main")
    assert not {"gpumix.hub.core", "gpumix.hub.server", "pynvml", "gpumix.advice.advisor"} & loaded
    assert "gpumix.hub.client" in loaded  # what the attached path does use


@pytest.mark.parametrize("argv", [["doctor"], ["power", "show"], ["doctor", "--json", "--hub", "/tmp/x.sock"]])
def test_gpumix_parses_doctor_and_power_show_without_the_hub_planner_nor_nvml(argv: list[str]) -> None:
    """`gpumix doctor` and `gpumix power show` attached to a running hub use the client, the snapshot and
    (doctor) the advisor: building every command's parser must not import what the other commands run
    (issue 13: 0.32 and 0.30 s on the H200 with a hub running, most of it importing)."""
    code = ("import sys, json; from gpumix.cli.main import build_parser;"
            f" args = build_parser().parse_args({argv!r}); print(json.dumps([args.command, sorted(sys.modules)]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    command, loaded = json.loads(result.stdout)
    assert command == argv[0]
    heavy = {"gpumix.hub.core", "gpumix.hub.server", "gpumix.plan.planner", "gpumix.plan.inputs",
             "gpumix.power.budget", "gpumix.power.supplies", "gpumix.advice.advisor", "gpumix.hw.nvml_backend",
             "gpumix.hw.topology", "gpumix.sim.rig", "pynvml"}
    assert not heavy & set(loaded), sorted(heavy & set(loaded))
    assert "gpumix.hub.client" in loaded  # what the attached path does use
