"""Who this rank is, as its hello to the hub says: launcher ids, process, GPU, job and launch."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from gpumix.agent import launcher_env


def uses_cuda() -> bool:
    """torch is imported and sees a GPU (never imports torch itself)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available())
    except Exception:
        return False


def torch_uuid(cuda_device: int) -> str | None:
    """The GPU's UUID as torch knows it ("GPU-..."), or None."""
    if not uses_cuda():
        return None
    try:
        uuid = str(sys.modules["torch"].cuda.get_device_properties(cuda_device).uuid)
    except Exception:
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def hello(rank: int, local_rank: int | None, world_size: int | None, gpu_uuid: str | None,
          nvml_index: int | None, job: str | None) -> dict[str, Any]:
    """The agent's first message on each connection."""
    hostname = socket.gethostname()
    # The launch this process belongs to: the hub keys ranks by (job, run id, rank), so two launches
    # never share a row. torchrun's run id (its default "none" is shared by every launch: then
    # torchrun's agent, our parent, names it); else $GPUMIX_RUN_ID; else this process alone.
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("GPUMIX_RUN_ID") or f"pid-{os.getpid()}@{hostname}"
    if run_id == "none" and "TORCHELASTIC_RUN_ID" in os.environ:
        run_id = f"torchrun-{os.getppid()}@{hostname}"
    return {
        "type": "hello", "role": "agent", "rank": rank, "local_rank": local_rank,
        "world_size": world_size, "pid": os.getpid(), "hostname": hostname,
        "gpu_uuid": gpu_uuid, "nvml_index": nvml_index, "job": job, "run_id": run_id[:128],
        "env": launcher_env.nccl_environment(), "versions": launcher_env.versions(),
    }
