"""What a dashboard with its hub in-process leaves unloaded, round 2 (issue 13: the dashboard's RSS).

Each module a running dashboard never calls costs its code objects and module dict for the process's
life: the CUDA probe's layer (a Protocol class and the torch wrapper; the hub's advisor reads only the
probe's thresholds) and getpass (the power audit's user, asked only when a cap changes). Checked in
fresh interpreters, like tests/test_lean_imports.py; the paths that need them still load them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from gpumix.probe import links
from tests.dashboard_script import DASHBOARD, run_fresh

# What the dashboard with its hub in-process imports: its entry, the node (hub, server, hardware) and the
# hub's advisor, which reads the kept probe results.
DASHBOARD_WITH_ITS_HUB = ("import gpumix.tui.main, gpumix.cli.node, gpumix.cli.hardware, gpumix.hub.core,"
                          " gpumix.advice.advisor, gpumix.power.caps")


def loaded_after(code: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", f"{code}; import sys, json; print(json.dumps(sorted(sys.modules)))"],
                            capture_output=True, text=True, check=True, cwd="/")
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_the_dashboard_and_its_hub_leave_the_cuda_probe_layer_unloaded() -> None:
    assert "gpumix.probe.cuda" not in loaded_after(DASHBOARD_WITH_ITS_HUB)
    assert "gpumix.probe.cuda" not in loaded_after("import gpumix.probe.measure")


def test_the_dashboard_and_its_hub_leave_getpass_unloaded() -> None:
    assert "getpass" not in loaded_after(DASHBOARD_WITH_ITS_HUB)
    # a running hub's power controller too: it names the audit's user when a cap first changes
    assert "getpass" not in loaded_after("from gpumix.power.caps import PowerController; PowerController(None)")


class OutOfMemoryCuda:
    """A CUDA layer whose every allocation fails the way torch's does (a RuntimeError)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def empty(self, nbytes: int, device: int | None, pinned: bool = False) -> object:
        raise RuntimeError(self.message)

    def release(self) -> None:
        pass


def test_the_probe_still_tells_out_of_memory_from_other_errors_with_its_layer_loaded_late() -> None:
    """probe_all_at_once imports is_out_of_memory where it needs it: out of memory is a skip, anything
    else is raised."""
    cuda = OutOfMemoryCuda("CUDA out of memory. Tried to allocate 256.00 MiB")
    assert links.probe_all_at_once(cuda, [0, 1], {0: 1e9, 1: 1e9}, 1 << 30, 0.01) == {"skipped": "out of GPU or pinned memory"}
    other = OutOfMemoryCuda("CUDA error: an illegal memory access was encountered")
    try:
        links.probe_all_at_once(other, [0], {0: 1e9}, 1 << 30, 0.01)
    except RuntimeError as error:
        assert "illegal memory access" in str(error)
    else:
        raise AssertionError("a CUDA error that is not out of memory must be raised")


def test_the_power_audit_still_names_the_user_with_getpass_loaded_late() -> None:
    code = ("import getpass; from gpumix.power.caps import PowerController;"
            " print(PowerController(None).user == getpass.getuser())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert result.stdout.strip() == "True"


RUN_THE_DASHBOARD = DASHBOARD + """
async def body(app, pilot):
    await pilot.pause()
    return sorted(sys.modules)

print(json.dumps(asyncio.run(drawn_then(body))))
"""


def test_a_running_dashboard_loads_neither_the_emoji_table_nor_the_dialogs_it_has_not_opened() -> None:
    """Column labels given as Text, never as markup strings (rich loads its 468 KB emoji table to read
    markup), and the plan, power and probe dialogs imported when first opened."""
    loaded = set(run_fresh(RUN_THE_DASHBOARD))
    assert "gpumix.tui.gpu_table" in loaded  # the dashboard did draw its table
    assert not {"rich._emoji_codes", "gpumix.tui.probe_screen", "gpumix.tui.power_screens",
                "gpumix.tui.plan_screen"} & loaded
