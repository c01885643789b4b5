"""pynvml narrowed to the NVML calls gpumix makes, for the interactive monitor (issue 13: RSS <= nvitop's + 10 MB).

pynvml defines ~450 functions, ~210 ctypes structures and ~1,600 constants at import, ~2.5 MB of Python heap;
gpumix calls about 40 functions. `narrow_pynvml()` drops from the loaded module every function, class and
constant that neither gpumix's code (NAMES_USED, kept in step with the sources by tests/test_nvml_narrow.py)
nor a kept function reaches by global name, transitively (through closures, methods and base classes). What it
drops is collected; called before Textual loads, the freed heap is reused by Textual instead of growing the
process (~1.2 MB).

The module object stays the one `import pynvml` gives, so the error classes every caller catches and the
simulator raises are the same objects. Every NVMLError class stays (a handler may name any of them), and the
NVML_ERROR_* and NVML_BRAND_* constants (pynvml maps an error's value to its class, the backend names a brand
by scanning NVML_BRAND_*). Only gpumix-top's interactive monitor narrows: a one-shot would pay the walk and a collection
for nothing kept long, and a process of someone else's (a training script with torch) may call any of pynvml.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Mapping
from typing import Any

# Every pynvml name gpumix, its TUI and its agent read: `pynvml.X`, and the nvml* names the backend calls
# by string (`call(index, "nvmlDeviceGet...")`) or on its `nvml` object. tests/test_nvml_narrow.py fails when
# a source names one that is missing here.
NAMES_USED = frozenset({
    "NVMLError", "NVMLError_FunctionNotFound", "NVMLError_GpuIsLost", "NVMLError_NoPermission",
    "NVMLError_NotFound", "NVMLError_NotSupported",
    "NVML_CLOCK_MEM", "NVML_CLOCK_SM", "NVML_FEATURE_ENABLED", "NVML_FI_DEV_PCIE_COUNT_RX_BYTES",
    "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", "NVML_NVLINK_DEVICE_TYPE_GPU", "NVML_NVLINK_DEVICE_TYPE_SWITCH",
    "NVML_NVLINK_MAX_LINKS", "NVML_PCIE_UTIL_RX_BYTES", "NVML_PCIE_UTIL_TX_BYTES", "NVML_SUCCESS",
    "NVML_TEMPERATURE_GPU", "NVML_VALUE_TYPE_SIGNED_INT", "NVML_VALUE_TYPE_SIGNED_LONG_LONG",
    "NVML_VALUE_TYPE_UNSIGNED_INT", "NVML_VALUE_TYPE_UNSIGNED_LONG", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG",
    "nvmlClocksEventReasonGpuIdle", "nvmlClocksEventReasonSwPowerCap", "nvmlClocksEventReasonSwThermalSlowdown",
    "nvmlDeviceGetBrand", "nvmlDeviceGetClockInfo", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetCount",
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetFanSpeed", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName",
    "nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetP2PStatus", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUUID", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceSetPowerManagementLimit", "nvmlInit", "nvmlShutdown", "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion",
})
# Constants kept by prefix: the backend names a brand by scanning NVML_BRAND_*; an error's value names its class.
KEPT_PREFIXES = ("NVML_BRAND_", "NVML_ERROR_")
CONSTANT_TYPES = (int, float, str, bytes)
KEEP_ENV = "GPUMIX_TOP_KEEP_PYNVML"  # 1: leave pynvml whole
MAX_WALK_STEPS = 100_000  # a bound on the reachability walk (pynvml has ~2,300 names)


def _codes_of(value: Any) -> list[types.CodeType]:
    """The code a module-level value runs: a function's own and its closure's (decorated wrappers), a class's
    methods along its MRO."""
    codes: list[types.CodeType] = []
    functions: list[Any] = []
    if isinstance(value, types.FunctionType):
        functions.append(value)
    elif isinstance(value, type):
        for klass in value.__mro__:
            for member in vars(klass).values():
                inner = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if isinstance(inner, property):
                    functions.extend(f for f in (inner.fget, inner.fset, inner.fdel) if f is not None)
                elif isinstance(inner, types.FunctionType):
                    functions.append(inner)
    while functions:
        function = functions.pop()
        codes.append(function.__code__)
        for cell in function.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(contents, types.FunctionType):
                functions.append(contents)
    return codes


def reachable_names(namespace: dict[str, Any], roots: frozenset[str] | set[str]) -> set[str]:
    """The names of NAMESPACE that ROOTS reach by global name: through the code of functions, closures and
    methods (nested code objects included), and through base classes defined in the module."""
    keep = {name for name in roots if name in namespace}
    todo = list(keep)
    steps = 0
    while todo and steps < MAX_WALK_STEPS:
        steps += 1
        value = namespace[todo.pop()]
        found: list[str] = []
        if isinstance(value, type):
            found.extend(klass.__name__ for klass in value.__mro__ if namespace.get(klass.__name__) is klass)
        stack = _codes_of(value)
        while stack:
            code = stack.pop()
            found.extend(code.co_names)
            stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
        for name in found:
            if name in namespace and name not in keep:
                keep.add(name)
                todo.append(name)
    return keep


def droppable_names(module: types.ModuleType, roots: frozenset[str] | set[str] = NAMES_USED) -> list[str]:
    """The functions, classes and constants of MODULE that nothing in ROOTS reaches; dunders, the NVMLError
    family and the constants of KEPT_PREFIXES stay."""
    namespace = vars(module)
    keep = reachable_names(namespace, roots)
    error = namespace.get("NVMLError")
    dropped = []
    for name, value in namespace.items():
        if name in keep or name.startswith("__") or name.startswith(KEPT_PREFIXES):
            continue
        if isinstance(value, CONSTANT_TYPES) and not isinstance(value, bool):
            dropped.append(name)  # ~1,600 ints and their names: ~0.2 MB
            continue
        if not isinstance(value, (types.FunctionType, type)):
            continue
        if isinstance(error, type) and isinstance(value, type) and issubclass(value, error):
            continue
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported from elsewhere (ctypes' own types): dropping frees nothing
        dropped.append(name)
    return dropped


def narrow_pynvml(environ: Mapping[str, str] | None = None) -> int:
    """Drop what gpumix never reaches from the loaded pynvml and collect it; the number of names dropped.
    Nothing when pynvml is not loaded, is not the nvidia-ml-py module (no NVMLError), or $KEEP_ENV is set
    (code of one's own in the monitor's process, a debugger, needs the whole of pynvml)."""
    if (os.environ if environ is None else environ).get(KEEP_ENV):
        return 0
    module = sys.modules.get("pynvml")
    if module is None or not isinstance(getattr(module, "NVMLError", None), type):
        return 0
    namespace = vars(module)
    dropped = droppable_names(module)
    for name in dropped:
        del namespace[name]
    gc.collect()
    return len(dropped)
