"""pynvml narrowed to what gpumix calls (gpumix/hw/nvml_narrow.py; issue 13: the dashboard's RSS).

The names list follows the sources; every function gpumix calls behaves the same after narrowing, each run
through pynvml's own Python code against a stand-in library (a dropped helper would raise NameError there);
gpumix-top's interactive start narrows, and a one-shot does not.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pynvml

from gpumix.hw.nvml_narrow import (
    KEEP_ENV,
    KEPT_PREFIXES,
    NAMES_USED,
    droppable_names,
    narrow_pynvml,
    reachable_names,
)

REPO = Path(__file__).resolve().parent.parent
PYNVML_NAME = re.compile(r"pynvml\.([A-Za-z_]\w*)")
NVML_CALL = re.compile(r"\b(nvml[A-Z]\w*)")  # called on an `nvml` object or by string: call(i, "nvmlDeviceGet...")


def names_in_sources() -> set[str]:
    found: set[str] = set()
    for folder in ("gpumix", "tui", "agent"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text()
            found.update(PYNVML_NAME.findall(text))
            found.update(NVML_CALL.findall(text))
    return found


def test_names_used_cover_every_pynvml_name_the_sources_read() -> None:
    namespace = vars(pynvml)
    named = {name for name in names_in_sources() if name in namespace}
    missing = sorted(name for name in named - NAMES_USED if not name.startswith(KEPT_PREFIXES))
    assert not missing, f"add to gpumix/hw/nvml_narrow.py NAMES_USED: {missing}"
    assert {"nvmlDeviceGetFieldValues", "nvmlDeviceGetMemoryInfo", "NVMLError_NotSupported", "NVML_CLOCK_SM",
            "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"} <= named


def test_the_walk_follows_closures_methods_and_bases() -> None:
    namespace: dict[str, object] = {}

    def helper() -> int:
        return 1

    def inner() -> int:
        return namespace["helper"]()  # type: ignore[operator, no-any-return]

    def decorate(function: types.FunctionType) -> types.FunctionType:
        def wrapper() -> int:
            return function()  # type: ignore[no-any-return]
        return wrapper  # type: ignore[return-value]

    exec(textwrap.dedent("""
        class Base:
            def method(self):
                return from_method()
        class Child(Base):
            pass
        def from_method():
            return 2
        def unused():
            return 3
        def reads_constant():
            return CONSTANT
        CONSTANT = 4
    """), namespace)
    namespace["helper"] = helper
    namespace["wrapped"] = decorate(types.FunctionType(compile("helper()", "<t>", "eval"), namespace))  # type: ignore[arg-type]
    keep = reachable_names(namespace, {"Child", "wrapped"})
    assert {"Child", "Base", "from_method", "wrapped", "helper"} <= keep
    assert "unused" not in keep and "reads_constant" not in keep


CALLS = r"""
import json, sys, ctypes, pynvml

class FakeLibrary:  # every NVML entry point answers NVML_SUCCESS and writes nothing, but for the process lists:
    def __getattr__(self, name):  # one process, so their structures and conversions run too
        def entry(*args):
            if "RunningProcesses" in name and args[2] is None:
                args[1]._obj.value = 1
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            return 0
        return entry

pynvml.nvmlLib = FakeLibrary()
dropped = 0
if sys.argv[1] == "narrow":
    from gpumix.hw.nvml_narrow import narrow_pynvml
    dropped = narrow_pynvml()
from gpumix.hw.nvml_narrow import NAMES_USED
handle = pynvml.c_nvmlDevice_t()
ARGS = {
    "nvmlDeviceGetCount": (), "nvmlInit": (), "nvmlShutdown": (), "nvmlSystemGetCudaDriverVersion": (),
    "nvmlSystemGetDriverVersion": (), "nvmlSystemGetNVMLVersion": (), "nvmlDeviceGetHandleByIndex": (0,),
    "nvmlDeviceGetFieldValues": (handle, [pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES]),
    "nvmlDeviceGetP2PStatus": (handle, handle, 0), "nvmlDeviceGetTopologyCommonAncestor": (handle, handle),
    "nvmlDeviceGetTemperature": (handle, pynvml.NVML_TEMPERATURE_GPU), "nvmlDeviceGetClockInfo": (handle, 0),
    "nvmlDeviceGetPcieThroughput": (handle, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    "nvmlDeviceSetPowerManagementLimit": (handle, 100000),
}
results = {}
for name in sorted(NAMES_USED):
    function = getattr(pynvml, name)
    if isinstance(function, type):
        results[name] = "class " + function.__name__
        continue
    args = ARGS.get(name)
    if args is None:
        args = (handle, 0) if name.startswith("nvmlDeviceGetNvLink") else (handle,)
    try:
        value = function(*args)
        shown = [value[0] if value else None] if isinstance(value, list) and value and not isinstance(value[0], int) else value
        if isinstance(shown, list) and shown and shown[0] is not None:
            shown = [sorted(k for k in vars(shown[0]) if not k.startswith("_"))]
        results[name] = type(value).__name__ + ":" + (repr(shown) if isinstance(value, (int, str, float, list)) else
                                                      repr(sorted(k for k in dir(value) if not k.startswith("_"))))
    except Exception as error:
        results[name] = "raised " + type(error).__name__ + ": " + str(error)
error = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
kept = {k: v for k, v in vars(pynvml).items() if isinstance(v, int) and (k in NAMES_USED or k.startswith(("NVML_BRAND_", "NVML_ERROR_")))}
print(json.dumps({"dropped": dropped, "calls": results, "constants": kept, "not_supported": type(error).__name__,
                  "is_not_supported": isinstance(error, pynvml.NVMLError_NotSupported)}))
"""


def run_calls(mode: str) -> dict:
    result = subprocess.run([sys.executable, "-c", CALLS, mode], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_every_call_gpumix_makes_behaves_the_same_after_narrowing() -> None:
    full, narrowed = run_calls("full"), run_calls("narrow")
    assert narrowed["dropped"] > 300  # most of pynvml goes
    raised = {name: outcome for name, outcome in narrowed["calls"].items() if "NameError" in outcome}
    assert not raised, raised
    assert narrowed["calls"] == full["calls"]
    assert sum(outcome.startswith("raised") for outcome in full["calls"].values()) < len(full["calls"]) // 2
    assert "usedGpuMemory" in full["calls"]["nvmlDeviceGetComputeRunningProcesses"]  # the list of one ran
    assert narrowed["constants"] == full["constants"]  # every constant gpumix reads, the brands and errors stay
    assert len(full["constants"]) > 60
    assert narrowed["not_supported"] == "NVMLError_NotSupported" and narrowed["is_not_supported"]


def test_droppable_keeps_the_error_family_and_what_roots_reach() -> None:
    dropped = set(droppable_names(pynvml))
    assert not dropped & NAMES_USED
    assert not any(name.startswith("NVMLError") for name in dropped)
    assert "_nvmlGetFunctionPointer" not in dropped and "_nvmlCheckReturn" not in dropped
    assert "nvmlDeviceGetMigMode" in dropped  # an NVML call gpumix never makes
    assert "NVML_DEVICE_MIG_ENABLE" in dropped and "NVML_CLOCK_SM" not in dropped  # a constant nothing kept reads
    assert "NVML_BRAND_GEFORCE" not in dropped and "NVML_ERROR_NOT_SUPPORTED" not in dropped
    reached = reachable_names(vars(pynvml), NAMES_USED)
    assert "NVML_ERROR_UNINITIALIZED" in reached or "NVML_ERROR_UNINITIALIZED" not in dropped


def test_the_interactive_monitor_narrows_and_a_one_shot_does_not(tmp_path: Path) -> None:
    """run_with_own_hub narrows before the app starts (run_app stubbed: no terminal needed); --once keeps pynvml
    whole."""
    script = textwrap.dedent(f"""
        import sys, pynvml
        import gpumix.tui.main as main
        main.run_app = lambda source, args: print("functions", sum(callable(v) for v in vars(pynvml).values())) or 0
        main.print_once = lambda *a, **k: print("functions", sum(callable(v) for v in vars(pynvml).values())) or 0
        sys.exit(main.main(["--sim", {str(REPO / "benchmarks" / "rig_1gpu.toml")!r}, "--interval", "1", *sys.argv[1:]]))
    """)
    env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(tmp_path), "GPUMIX_HUB": str(tmp_path / "none.sock"),
           "HOME": str(tmp_path)}
    counts = {}
    for mode in ("interactive", "once"):
        extra = ["--once"] if mode == "once" else []
        result = subprocess.run([sys.executable, "-c", script, *extra], capture_output=True, text=True, timeout=120,
                                cwd=REPO, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        counts[mode] = int(result.stdout.split("functions")[-1].split()[0])
    assert counts["interactive"] < counts["once"] - 300


def test_the_opt_out_keeps_pynvml_whole() -> None:
    before = len(vars(pynvml))
    assert narrow_pynvml({KEEP_ENV: "1"}) == 0
    assert len(vars(pynvml)) == before
