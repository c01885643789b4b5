"""`gpumix hub` over the machine's GPUs read as N (benchmarks/alias_nvml.py), for bench_hub.py's --tick-cpu
on a machine with fewer GPUs than the issue 13 goal names (10): the hub's CPU for N GPUs and R ranks, a
floor (each alias's driver state is the real GPU's, warm), beside N times one GPU's share, a ceiling.

    python benchmarks/bench_hub.py --tick-cpu --tick-ranks 0,10 \\
        --hub-command "python benchmarks/aliased_hub.py 10 hub --interval 1" --out hub_tick_aliased10.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from alias_nvml import AliasNvml  # noqa: E402


def main() -> int:
    count, argv = int(sys.argv[1]), sys.argv[2:]
    import gpumix.cli.hardware as hardware_module
    from gpumix.cli.main import main as gpumix_main
    from gpumix.hw.nvml_backend import NvmlBackend

    hardware_module.NvmlBackend = lambda **kwargs: NvmlBackend(nvml=AliasNvml(count), **kwargs)  # type: ignore[misc]
    return gpumix_main(argv)


if __name__ == "__main__":
    sys.exit(main())
