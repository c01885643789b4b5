"""What the launcher tells a rank through its environment: rank, world, and its GPU.

torchrun and the DeepSpeed launcher set RANK / LOCAL_RANK / WORLD_SIZE;
Slurm and Open MPI have their own names. CUDA_VISIBLE_DEVICES decides which
physical GPU `cuda:N` is: by index (NVML order when CUDA_DEVICE_ORDER is
PCI_BUS_ID, as on every multi-GPU box worth monitoring) or by UUID.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

_RANK_NAMES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_LOCAL_RANK_NAMES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_WORLD_NAMES = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def ascii_count(text: str, max_digits: int = 18) -> int | None:
    """A count written in at most `max_digits` ASCII digits, else None: str.isdigit() also takes "²",
    which int() refuses, and int() refuses 4,300 digits or more; an environment's text is data."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= max_digits else None


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = env.get(name)
        if value is not None and (count := ascii_count(value.strip())) is not None:
            return count
    return None


def rank_from_env(env: Mapping[str, str] = os.environ) -> tuple[int, int | None, int | None]:
    """(rank, local_rank, world_size); a plain single process is rank 0 of 1."""
    rank = _first_int(env, _RANK_NAMES)
    local = _first_int(env, _LOCAL_RANK_NAMES)
    world = _first_int(env, _WORLD_NAMES)
    return (rank if rank is not None else 0), local, (world if world is not None else (None if rank else 1))


def physical_gpu(cuda_index: int, env: Mapping[str, str] = os.environ) -> tuple[int | None, str | None]:
    """(NVML index, UUID) of `cuda:cuda_index` after CUDA_VISIBLE_DEVICES; either may be unknown."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return cuda_index, None
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if not 0 <= cuda_index < len(entries):
        return None, None
    entry = entries[cuda_index]
    if (index := ascii_count(entry)) is not None:
        return index, None
    if entry.startswith("GPU-"):
        return None, entry
    return None, None  # MIG-... or another form we do not map


def nccl_environment(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_ALGO, ... as set."""
    return {name: value[:256] for name, value in sorted(env.items()) if name.startswith(NCCL_PREFIXES)}


def versions() -> dict[str, str]:
    """torch, CUDA, NCCL and driver versions, from what this process already loaded."""
    found = {"python": sys.version.split()[0]}
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = str(torch.__version__)
        cuda = getattr(torch.version, "cuda", None)
        if cuda:
            found["cuda"] = str(cuda)
        try:
            nccl = torch.cuda.nccl.version()
            found["nccl"] = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception:  # no NCCL in a CPU build
            pass
    try:
        with open("/proc/driver/nvidia/version") as handle:  # no NVML import in a training process
            found.update(driver_from_proc(handle.readline()))
    except OSError:
        pass
    return found


def driver_from_proc(line: str) -> dict[str, str]:
    """'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...' -> 580.159.04"""
    match = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", line)
    return {"driver": match.group(1)} if match else {}
