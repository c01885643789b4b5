"""A busy GPU for the monitors to watch: a bf16 matmul loop and host-to-device copies, together.

Two CUDA streams on one GPU: one multiplies 8192x8192 bf16 matrices (as benchmarks/competitor.py),
the other copies a pinned 256 MiB host buffer to the device over and over, so the SMs, the power
draw and the PCIe link all move. Prints one line a second (copies in GB/s, matmuls per second);
runs for --seconds or until killed. Changes no GPU setting.

    python benchmarks/gpu_load.py --seconds 120 --gpu 0
"""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--copy-mib", type=int, default=256)
    args = parser.parse_args(argv)
    import torch  # only here: --help works without it

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    device = torch.device(f"cuda:{args.gpu}")
    matrix = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    host = torch.empty(args.copy_mib << 20, dtype=torch.uint8).pin_memory()
    target = torch.empty_like(host, device=device)
    compute, copies = torch.cuda.Stream(device), torch.cuda.Stream(device)
    ends = time.monotonic() + args.seconds
    copied_bytes = matmuls = 0
    report_at = time.monotonic() + 1.0
    while time.monotonic() < ends:
        with torch.cuda.stream(compute):
            for _ in range(4):
                matrix = (matrix @ matrix).clamp_(-1, 1)
        with torch.cuda.stream(copies):
            for _ in range(4):
                target.copy_(host, non_blocking=True)
        compute.synchronize()
        copies.synchronize()
        matmuls += 4
        copied_bytes += 4 * host.numel()
        if time.monotonic() >= report_at:
            print(f"gpu_load: {copied_bytes / 1e9:.1f} GB copied, {matmuls} matmuls", flush=True)
            copied_bytes = matmuls = 0
            report_at += 1.0
    return 0


if __name__ == "__main__":
    sys.exit(main())
