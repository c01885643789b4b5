"""`gpumix hub` with every NVML setter replaced by a tripwire: for runs on lent GPUs whose settings
must never change (the project's rule). Any call of a setter is written to --attempts FILE and refused
with NVML's own "no permission" error, before it could reach the driver; the run's record then says
whether anything tried. Everything after `--` is passed to `gpumix hub`.

    python benchmarks/hub_tripwire.py --attempts /tmp/attempts.txt -- --interval 1
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pynvml

SETTER_PREFIXES = ("nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlUnitSet", "nvmlSet",
                   "nvmlDeviceModify", "nvmlGpuInstanceDestroy", "nvmlDeviceCreate")


def install_tripwire(attempts_path: str) -> list[str]:
    """Replace the setters in pynvml before gpumix imports it (a `from pynvml import X` then gets the
    tripwire too). Returns the names replaced."""
    def tripwire(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            with open(attempts_path, "a", encoding="utf-8") as attempts:
                attempts.write(f"{name}{args!r}\n")
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return refuse

    names = [name for name in dir(pynvml) if name.startswith(SETTER_PREFIXES) and callable(getattr(pynvml, name))]
    for name in names:
        setattr(pynvml, name, tripwire(name))
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", required=True, help="file that records every setter call")
    args, rest = parser.parse_known_args()
    hub_args = rest[1:] if rest[:1] == ["--"] else rest
    names = install_tripwire(args.attempts)
    open(args.attempts, "a", encoding="utf-8").close()
    print(f"hub_tripwire: {len(names)} NVML setters replaced", file=sys.stderr, flush=True)
    from gpumix.cli.main import main as gpumix_main

    return gpumix_main(["hub", *hub_args])


if __name__ == "__main__":
    sys.exit(main())
