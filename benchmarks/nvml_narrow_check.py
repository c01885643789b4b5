"""On a real GPU: the hub's snapshot before and after pynvml is narrowed (gpumix/hw/nvml_narrow.py), field by
field. Every GPU field that had a value must still have one (a call the narrowing dropped would leave it empty
or raise). Reads only: no GPU setting is changed.

    python benchmarks/nvml_narrow_check.py --out results.json [--sim RIG]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def filled(snapshot: dict[str, Any]) -> list[list[str]]:
    """Per GPU, the names of the fields that hold a value."""
    return [sorted(k for k, v in gpu.items() if v not in (None, [], {})) for gpu in snapshot["gpus"]]


def ticks(hub: Any, count: int) -> dict[str, Any]:
    snapshot: dict[str, Any] = {}
    for _ in range(count):
        snapshot = hub.tick()
        time.sleep(1.0)
    return snapshot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sim", default=None, help="a rig file instead of the real GPUs (a dry run)")
    args = parser.parse_args()
    from gpumix.cli.hardware import open_hardware
    from gpumix.hub import Hub
    from gpumix.hw.nvml_narrow import narrow_pynvml

    hub = Hub(open_hardware(sim_file=args.sim))
    before = ticks(hub, 3)
    import pynvml

    names_before = len(vars(pynvml))
    narrow_pynvml()
    names_after = len(vars(pynvml))
    after = ticks(hub, 3)
    fields_before, fields_after = filled(before), filled(after)
    lost = [sorted(set(b) - set(a)) for b, a in zip(fields_before, fields_after, strict=True)]
    result = {
        "command": " ".join(["python", *sys.argv]),
        "pynvml_names_before": names_before, "pynvml_names_after": names_after,
        "gpu_fields_before": fields_before, "gpu_fields_after": fields_after,
        "fields_lost_per_gpu": lost, "fields_lost_count": sum(map(len, lost)),
        "errors_after": [g.get("error") for g in after["gpus"] if g.get("error")],
        "gpu_after": after["gpus"],
    }
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1, default=str)
    print(json.dumps({k: result[k] for k in ("pynvml_names_before", "pynvml_names_after", "fields_lost_per_gpu",
                                              "errors_after")}))
    return 0 if result["fields_lost_count"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
