"""The hub's tick on a simulated rig split into its parts, per GPU and per rank, with the simulator's own
share set apart (issue 13): what a `gpumix hub --sim mixed-10` second costs, in process, deterministic.

Each round is what the hub does in one second with R ranks at 10 steps/s sending once a second: every
rank's agent write (one columnar frame of 10 steps, from a real Agent) goes through the hub's read path
(FrameCutter, handle_frames), then one Hub.tick (the world's step, the NVML reading, the host, the
snapshot, the history, the merge of the ranks and the findings), then one client's snapshot reply
encoded as the server does (requests.answer's `protocol.encode`).

Two measures per rank count R (--ranks, default 0,10):
- Python calls per round (sys.setprofile's call and c_call events; a loaded box does not move them),
  each filed under the innermost part of the round on the stack (PARTS below) and under who made it:
  the simulator (a function of gpumix/sim or random, or a builtin such code called) or the product;
- the process's CPU time per round (the thread's before session 10, which left out the PCIe window's
  calls on a pool's threads), best of --repeats, without the profiler; the simulator's share
  of it estimated from the calls' share (a call's cost differs between the two: the calls are the point).
Per rank: (calls at the most ranks - at none) / ranks; per GPU: the no-rank product calls / GPUs (the
hub's fixed part counted in).

    .venv/bin/python benchmarks/hub_tick_parts.py --out parts.json
    PYTHONPATH=/tmp/tree_before .venv/bin/python benchmarks/hub_tick_parts.py --out before.json
"""

from __future__ import annotations

import argparse
import functools
import operator
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_hub_steps  # noqa: E402 - the agent's write and the rank hellos, shared

# (file suffix, function name) -> part; the innermost on the stack wins
PARTS = {
    ("gpumix/hub/agent_stream.py", "handle_frames"): "steps (read, decode, file)",
    ("gpumix/hw/hardware.py", "tick"): "world step",
    ("gpumix/sim/machine.py", "tick"): "world step",
    ("gpumix/hw/nvml_backend.py", "sample"): "GPU reading",
    ("gpumix/hw/host.py", "sample"): "host reading",
    ("gpumix/hw/host.py", "processes"): "host reading",
    ("gpumix/hub/snapshot.py", "build_snapshot"): "snapshot rows",
    ("gpumix/hub/history.py", "add"): "history",
    ("gpumix/hub/cap_samples.py", "view"): "cap samples",
    ("gpumix/hub/cap_samples.py", "expire"): "cap samples",
    ("gpumix/hub/merge.py", "merge_ranks"): "merge: other",
    ("gpumix/hub/merge.py", "rank_row"): "merge: rank rows",
    ("gpumix/hub/ranks.py", "mark_stragglers"): "merge: rank rows",
    ("gpumix/hub/ranks.py", "runs_summary"): "merge: runs",
    ("gpumix/hub/efficiency.py", "add_efficiency"): "merge: runs",
    ("gpumix/power/tiers.py", "tier_table"): "merge: tiers",
    ("gpumix/hub/plan_in_force.py", "view"): "merge: plan",
    ("gpumix/advice/advisor.py", "findings"): "merge: findings (hardware)",
    ("gpumix/advice/field.py", "field_findings"): "merge: findings (ranks)",
    ("gpumix/advice/cpu_forwarding.py", "cpu_forwarding_findings"): "merge: findings (ranks)",
    ("gpumix/advice/finding.py", "to_json"): "merge: findings (hardware)",
    ("gpumix/wire/protocol.py", "encode"): "client reply encoding",
}


def _simulated(path: str) -> bool:
    return "/gpumix/sim/" in path or path.endswith("random.py")


class CallCounter:
    """sys.setprofile hook: calls by (part, simulator or product)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], int] = {}
        self._codes: dict[Any, str | None] = {}

    def _part_of(self, code: Any) -> str | None:
        part = self._codes.get(code, "?")
        if part == "?":
            part = next((name for (suffix, function), name in PARTS.items()
                         if code.co_name == function and code.co_filename.endswith(suffix)), None)
            self._codes[code] = part
        return part

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event not in ("call", "c_call"):
            return
        part, walk = None, frame
        while walk is not None and part is None:
            part = self._part_of(walk.f_code)
            walk = walk.f_back
        file = frame.f_code.co_filename  # a c_call's frame is its caller's: a builtin goes with who called it
        who = "simulator" if _simulated(file) else "product"
        key = (part or "round: other", who)
        self.calls[key] = self.calls.get(key, 0) + 1


class RoundClock:
    """The simulated world's clock, one second a round (session 10): on the monotonic clock, the many rounds a
    second made the world's per-second noise, its PCIe window and the 5 s slow readings rarer than at a hub's
    1 s ticks. Read through C (a partial of attrgetter), one call like time.monotonic, no Python frame."""

    def __init__(self) -> None:
        self.now_s = time.monotonic()
        self.read = functools.partial(operator.attrgetter("now_s"), self)


def make_round(ranks: int, client: bool = True) -> Any:
    """(the hub, one round): R ranks' writes read, one tick, and with CLIENT one snapshot reply encoded (the
    device's measure, `bench_hub.py --tick-cpu`, has no client)."""
    from gpumix.hub import requests as hub_requests  # noqa: F401 - the server's module, imported as it is
    from gpumix.hub.agent_stream import FrameCutter, handle_frames
    from gpumix.wire import protocol

    data, _ = bench_hub_steps.agent_write()
    clock = RoundClock()
    hub = bench_hub_steps.make_hub(world_clock=clock.read)
    keys = [hub.agent_hello(bench_hub_steps.hello(rank)) for rank in range(ranks)]
    cutters = [FrameCutter() for _ in keys]

    def one_round() -> None:
        clock.now_s += 1.0  # a round is a hub second: the world's noise and slow readings as at 1 s ticks
        for key, cutter in zip(keys, cutters, strict=True):
            handle_frames(hub, key, cutter.frames(data))
        hub.tick()
        if client:
            protocol.encode({"type": "snapshot", "snapshot": hub.snapshot()})

    return hub, one_round


def measure(ranks: int, rounds: int, repeats: int, client: bool = True) -> dict[str, Any]:
    hub, one_round = make_round(ranks, client=client)
    for _ in range(20):  # warm: the deques full, the caches made
        one_round()
    per_round_ms = []
    for _ in range(repeats):
        started = time.process_time()  # the process's: the PCIe window's calls run on a pool's threads
        for _ in range(rounds):
            one_round()
        per_round_ms.append((time.process_time() - started) / rounds * 1e3)
    counter = CallCounter()
    sys.setprofile(counter)
    try:
        for _ in range(rounds):
            one_round()
    finally:
        sys.setprofile(None)
    by_part: dict[str, dict[str, float]] = {}
    for (part, who), count in sorted(counter.calls.items()):
        by_part.setdefault(part, {})[who] = round(count / rounds, 1)
    simulator = sum(count for (_, who), count in counter.calls.items() if who == "simulator") / rounds
    total = sum(counter.calls.values()) / rounds
    return {"ranks": ranks, "gpus": len(hub.snapshot()["gpus"]), "client_reply": client,
            "cpu_ms_per_round_best": round(min(per_round_ms), 3),
            "cpu_ms_per_round_all": [round(x, 3) for x in per_round_ms],
            "calls_per_round": round(total, 1), "calls_per_round_simulator": round(simulator, 1),
            "calls_per_round_product": round(total - simulator, 1),
            "cpu_ms_per_round_product_estimate": round(min(per_round_ms) * (total - simulator) / total, 3),
            "calls_per_round_by_part": dict(sorted(by_part.items(), key=lambda item: -sum(item[1].values())))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="0,10")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--no-client", action="store_true", help="no client reply in a round (as the device's measure)")
    args = parser.parse_args(argv)
    import gpumix

    runs = [measure(int(n), args.rounds, args.repeats, client=not args.no_client) for n in args.ranks.split(",")]
    low, high = runs[0], runs[-1]
    summary: dict[str, Any] = {"product_calls_per_gpu_no_rank": round(low["calls_per_round_product"] / low["gpus"], 1)}
    if high["ranks"] > low["ranks"]:
        spread = high["ranks"] - low["ranks"]
        summary["product_calls_per_rank"] = round(
            (high["calls_per_round_product"] - low["calls_per_round_product"]) / spread, 1)
        summary["cpu_ms_per_rank_product_estimate"] = round(
            (high["cpu_ms_per_round_product_estimate"] - low["cpu_ms_per_round_product_estimate"]) / spread, 4)
    summary["cpu_ms_per_gpu_product_estimate_no_rank"] = round(low["cpu_ms_per_round_product_estimate"] / low["gpus"], 4)
    result = {
        "benchmark": "hub_tick_parts", "gpumix_from": str(Path(gpumix.__file__).parent),
        "machine": bench_hub_steps.machine(), "command": bench_hub_steps.command(),
        "summary": summary, "runs": runs,
    }
    return bench_hub_steps.report(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
