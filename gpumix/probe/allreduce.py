"""The all-reduce floor: NCCL all-reduce bus bandwidth across the GPUs, one worker process per GPU,
with and without NCCL_P2P_DISABLE=1; the transport is read from NCCL's own log (NCCL_DEBUG=INFO
into NCCL_DEBUG_FILE), e.g. 'via P2P/CUMEM', 'via SHM/direct/direct', 'via P2P/IPC', 'via NET/Socket/0'.

`python -m gpumix.probe.allreduce RANK WORLD PORT NBYTES SECONDS [BACKEND]` is the worker (BACKEND
gloo runs the same all-reduces on the CPU: how the process machinery is tested without GPUs)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_VIA = re.compile(r"\bvia ([A-Za-z0-9_/]+)")
MAX_LOG_BYTES = 4 * 1024**2  # read at most this much of each rank's log
MAX_TRANSPORTS = 16


def transports_in(log_text: str) -> list[str]:
    """The distinct transports NCCL says its channels go through, in order of first mention."""
    found: list[str] = []
    for match in _VIA.finditer(log_text):
        if match.group(1) not in found and len(found) < MAX_TRANSPORTS:
            found.append(match.group(1))
    return found


def bus_bytes_per_s(nbytes: int, seconds: float, world: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algorithm bandwidth x 2(n-1)/n."""
    return nbytes / seconds * 2 * (world - 1) / world


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def measure(devices: list[int], nbytes: int, p2p_disabled: bool, timeout_s: float,
            backend: str = "nccl") -> dict[str, Any]:
    """One all-reduce measurement over `devices` (CUDA indices), in fresh worker processes."""
    label = {"p2p_disabled": p2p_disabled}
    with tempfile.TemporaryDirectory(prefix="gpumix-probe-") as folder:
        port = free_port()
        workers = []
        for rank, device in enumerate(devices):
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": _visible(device), "NCCL_DEBUG": "INFO",
                   "NCCL_DEBUG_SUBSYS": "INIT,P2P,NET", "NCCL_DEBUG_FILE": f"{folder}/nccl.{rank}.log"}
            env.pop("NCCL_P2P_DISABLE", None)
            if p2p_disabled:
                env["NCCL_P2P_DISABLE"] = "1"
            # one process a GPU sees only its GPU: NCCL still finds the peers through the host.
            # Output goes to files: a pipe left unread while another rank is waited on could block it.
            with open(f"{folder}/out.{rank}", "w") as out, open(f"{folder}/err.{rank}", "w") as err:
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "gpumix.probe.allreduce", str(rank), str(len(devices)), str(port),
                     str(nbytes), f"{max(timeout_s / 4, 0.2):.3f}", backend], env=env, stdout=out, stderr=err))
        deadline = time.monotonic() + timeout_s
        outputs = []
        for rank, worker in enumerate(workers):
            try:
                worker.wait(timeout=max(deadline - time.monotonic(), 0.1))
                outputs.append((worker.returncode, _tail(f"{folder}/out.{rank}"), _tail(f"{folder}/err.{rank}")))
            except subprocess.TimeoutExpired:
                for other in workers:
                    other.kill()
                for other in workers:
                    other.wait()
                return {**label, "error": f"no result within {timeout_s:.0f} s (NCCL hung?)",
                        "transports": _read_transports(folder, len(devices))}
        transports = _read_transports(folder, len(devices))
    failed = [(code, err) for code, _, err in outputs if code != 0]
    if failed:
        last = (failed[0][1].strip().splitlines() or ["no output"])[-1][:300]
        return {**label, "error": f"a worker failed: {last}", "transports": transports}
    try:
        result = json.loads(outputs[0][1].strip().splitlines()[-1])
        seconds = float(result["seconds_per_op"])
    except (ValueError, KeyError, IndexError, TypeError):
        return {**label, "error": "rank 0 gave no result", "transports": transports}
    return {**label, "size_bytes": nbytes, "seconds_per_op": seconds, "transports": transports,
            "bus_bytes_per_s": bus_bytes_per_s(nbytes, seconds, len(devices)), "correct": result.get("correct")}


def _visible(device: int) -> str:
    """The CUDA index as the parent sees it, mapped through its own CUDA_VISIBLE_DEVICES."""
    parent = [part for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip()]
    return parent[device] if device < len(parent) else str(device)


def _tail(path: str, max_bytes: int = 64 * 1024) -> str:
    """The end of a worker's output (its result is the last line; its error the last of stderr)."""
    with open(path, "rb") as output:
        output.seek(max(0, os.path.getsize(path) - max_bytes))
        return output.read().decode(errors="replace")


def _read_transports(folder: str, ranks: int) -> list[str]:
    found: list[str] = []
    for path in sorted(Path(folder).glob("nccl.*")):
        with open(path, errors="replace") as log:
            for transport in transports_in(log.read(MAX_LOG_BYTES)):
                if transport not in found:
                    found.append(transport)
    return found


def allreduce_findings(floor: dict[str, Any]) -> list[dict[str, Any]]:
    """NCCL's P2P slower than going through host memory: P2P is worth turning off."""
    runs = {run.get("p2p_disabled"): run for run in floor.get("runs", [])}
    with_p2p, without = runs.get(False, {}), runs.get(True, {})
    if "error" in with_p2p and "error" not in without and without:
        return [{"severity": "error", "code": "nccl_p2p_fails", "gpus": floor["gpus"],
                 "message": f"the all-reduce failed with P2P ({with_p2p['error']}) and ran with"
                            " NCCL_P2P_DISABLE=1", "fix": "train with NCCL_P2P_DISABLE=1"}]
    fast, slow = without.get("bus_bytes_per_s"), with_p2p.get("bus_bytes_per_s")
    if fast and slow and fast > 1.2 * slow:
        return [{"severity": "warning", "code": "nccl_p2p_slower", "gpus": floor["gpus"],
                 "message": f"the all-reduce ran {fast / slow:.1f}x faster with NCCL_P2P_DISABLE=1"
                            f" ({', '.join(without.get('transports', [])) or '?'}) than with P2P"
                            f" ({', '.join(with_p2p.get('transports', [])) or '?'})",
                 "fix": "train with NCCL_P2P_DISABLE=1"}]
    return []


def worker(rank: int, world: int, port: int, nbytes: int, budget_s: float, backend: str = "nccl") -> None:
    import torch
    import torch.distributed as dist

    on_gpu = backend == "nccl"
    device = "cuda:0" if on_gpu else "cpu"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu:
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    data = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    dist.all_reduce(data)  # warm-up: connects the channels (the log's transport lines)
    sync()
    correct = bool(torch.all(data == world).item())
    start = time.perf_counter()
    dist.all_reduce(data)
    sync()
    one_s = max(time.perf_counter() - start, 1e-6)
    repeats = torch.tensor([max(1, min(50, int(budget_s / one_s)))], device=device)
    dist.broadcast(repeats, 0)  # every rank runs the same number of all-reduces
    start = time.perf_counter()
    for _ in range(int(repeats.item())):
        dist.all_reduce(data)
    sync()
    seconds = (time.perf_counter() - start) / int(repeats.item())
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"seconds_per_op": seconds, "correct": correct}), flush=True)


if __name__ == "__main__":
    worker(*(int(word) for word in sys.argv[1:5]), float(sys.argv[5]), *sys.argv[6:7])
