"""Where a sampled CUDA copy's time goes on the training thread (issue 13): each call of the agent's
copying step (agent/lazy.py LazyScalar on a CUDA loss) timed alone, the GPU kept busy by a matmul per
iteration and 1 ms of CPU between copies, with a fresh pinned buffer per copy (PinnedPool's first
512 takes) and with a buffer of one pinned block (PinnedBlock); a loss that requires grad (detached
first) against one that does not (copied as it is); a step's loss and scale with an event each against
one event after both (the agent's copying step). Needs a GPU.

    python benchmarks/copy_step_probe.py --iterations 300 --out copy_step_probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).parents[1]))  # after the installed packages: gpumix.agent is agent/

from gpumix.agent.lazy import LazyScalar, PinnedPool, record_step_event  # noqa: E402
from gpumix.agent.pinned_block import PinnedBlock  # noqa: E402


def spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def each_event(pool: PinnedPool, *values: torch.Tensor) -> None:
    """The copies as the agent made them before: each records an event of its own."""
    for value in values:
        LazyScalar(value, pool)


def step_copies(pool: PinnedPool, *values: torch.Tensor) -> None:
    """A due step's copies as agent/core.py makes them: one event recorded after the last."""
    pool.step_copies = []
    for value in values:
        LazyScalar(value, pool)
    record_step_event(pool)


def probe(iterations: int, size: int) -> dict[str, dict[str, float]]:
    """Per call: median, mean and p99 µs of each part of a copying step."""
    matrix = torch.randn(size, size, device="cuda")
    weight = torch.ones((), device="cuda", requires_grad=True)  # a loss autograd tracks: detached when copied
    scale = torch.full((), 65536.0, device="cuda")  # a GradScaler's scale: no grad
    fresh_pool, block = PinnedPool(size=4096), PinnedBlock(torch, 512)
    timings: dict[str, list[float]] = {}

    def timed(name: str, call, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        started = time.perf_counter()
        result = call(*args, **kwargs)
        timings.setdefault(name, []).append(time.perf_counter() - started)
        return result

    for _ in range(iterations):
        loss = (matrix @ matrix).mean()
        spin(0.001)
        tensor = timed("detach", loss.detach)
        timed("fresh pinned buffer (PinnedPool.take)", fresh_pool.take, torch)
        host = timed("block buffer (PinnedBlock.take)", block.take, torch)
        timed("copy_ non_blocking", host.copy_, tensor, non_blocking=True)
        event = timed("torch.cuda.Event()", torch.cuda.Event)
        timed("event.record()", event.record)
        spin(0.001)
        timed("LazyScalar, block pool", LazyScalar, loss, block)
        spin(0.001)
        timed("LazyScalar, fresh pool", LazyScalar, loss, fresh_pool)
        spin(0.001)
        tracked = loss * weight
        timed("LazyScalar, block pool, a loss that requires grad (detached)", LazyScalar, tracked, block)
        spin(0.001)
        timed("a step's loss and scale, an event each", each_event, block, tracked, scale)
        spin(0.001)
        timed("a step's loss and scale, one event (the agent's step)", step_copies, block, tracked, scale)
    torch.cuda.synchronize()
    result = {}
    for name, values in timings.items():
        ordered = sorted(values)
        result[name] = {"median_us": statistics.median(ordered) * 1e6, "mean_us": statistics.fmean(ordered) * 1e6,
                        "p99_us": ordered[int(0.99 * len(ordered))] * 1e6}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--size", type=int, default=2048, help="the busy matmul's N (default 2048)")
    parser.add_argument("--out")
    args = parser.parse_args()
    result = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "iterations": args.iterations, "parts": probe(args.iterations, args.size)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
