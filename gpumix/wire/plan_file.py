"""The plan a supervised run hands its ranks, and the files of the restart protocol.

Standard library only: the agent reads these inside training processes.

Files in the run's control folder (GPUMIX_CONTROL_DIR), each written whole
(temp file + rename, so a reader never sees half of one):
  stop.json         {"restart_id", "stop_after_step"}  the supervisor asks every rank to stop there
  ckpt-rankR.json   {"restart_id", "step", "ok", "error"} a rank's checkpoint hook ran (or failed)
  decision.json     {"restart_id", "decision": "exit" | "continue"} the supervisor's verdict
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PLAN_ENV = "GPUMIX_PLAN"  # path of this run's plan file
CONTROL_DIR_ENV = "GPUMIX_CONTROL_DIR"
RESUME_STEP_ENV = "GPUMIX_RESUME_STEP"  # optimizer steps already done (0: a fresh start)
STAIR_PROBE_ENV = "GPUMIX_STAIR_PROBE"  # `gpumix run --stair-probe`: the probe's granule, first launch only
MAX_PATH_CHARS = 4096  # PATH_MAX: a config path in a plan is at most this long


@dataclass(frozen=True)
class RankShare:
    """One rank's part of every global batch."""

    rank: int
    samples: int  # n_r
    micro_batch: int  # m_r
    accumulation_steps: int  # k_r, n_r = m_r * k_r
    loss_weight: float  # n_r * R / B


@dataclass(frozen=True)
class RunPlan:
    plan_id: str
    global_batch: int
    shares: tuple[RankShare, ...]
    # When the plan leaves ranks out: the kept ranks' GPUs (UUIDs), in the new rank order, and how
    # many ranks the job had before. None / 0: the job keeps its ranks and GPUs.
    gpus: tuple[str, ...] | None = None
    ranks_before: int = 0
    # `gpumix plan --deepspeed-config --apply`: each rank's DeepSpeed config (absolute paths, in the
    # new rank order), all with the same accumulation steps k. None: not a DeepSpeed plan.
    deepspeed_configs: tuple[str, ...] | None = None

    @property
    def samples_per_rank(self) -> list[int]:
        return [share.samples for share in self.shares]

    @property
    def world_before(self) -> int:
        """The ranks the running job has, which this plan was made for."""
        return self.ranks_before or len(self.shares)

    def share(self, rank: int) -> RankShare:
        return self.shares[rank]

    def deepspeed_config(self, rank: int) -> str | None:
        """The DeepSpeed config file this rank starts with, when the plan carries them."""
        return self.deepspeed_configs[rank] if self.deepspeed_configs is not None else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"plan_id": self.plan_id, "global_batch": self.global_batch,
                                "ranks": [asdict(share) for share in self.shares]}
        if self.gpus is not None:
            data["gpus"] = list(self.gpus)
        if self.ranks_before:
            data["ranks_before"] = self.ranks_before
        if self.deepspeed_configs is not None:
            data["deepspeed_configs"] = list(self.deepspeed_configs)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        """From a plan file, or from the planner's JSON (whose ranks carry the same keys). Ranks
        with 0 samples (left out on purpose) are dropped and the rest renumbered in order; their
        GPUs, where the planner names them, become `gpus`, so the relaunch runs on those alone."""
        ranks = sorted(data["ranks"], key=lambda r: int(r["rank"]))
        if [int(r["rank"]) for r in ranks] != list(range(len(ranks))):
            raise ValueError("a plan names every rank 0..R-1 once")
        kept = [r for r in ranks if int(r["samples"]) != 0]
        if not kept:
            raise ValueError("a plan needs at least one rank with samples")
        shares = tuple(
            RankShare(rank=new_rank, samples=int(r["samples"]), micro_batch=int(r["micro_batch"]),
                      accumulation_steps=int(r["accumulation_steps"]), loss_weight=float(r["loss_weight"]))
            for new_rank, r in enumerate(kept)
        )
        if any(s.samples < 1 or s.micro_batch * s.accumulation_steps != s.samples for s in shares):
            raise ValueError("every rank needs n_r >= 1 samples with n_r = m_r * k_r")
        if sum(s.samples for s in shares) != int(data["global_batch"]):
            raise ValueError("the ranks' samples must add up to the global batch")
        gpus = data.get("gpus")
        ranks_before = int(data.get("ranks_before") or 0)
        if len(kept) < len(ranks):  # the planner's JSON: every rank of the job, some left out
            ranks_before = len(ranks)
            uuids = [r.get("gpu_uuid") for r in kept]
            gpus = uuids if all(uuids) else None
        if gpus is not None and (len(gpus) != len(shares) or not all(isinstance(g, str) and g for g in gpus)):
            raise ValueError("'gpus' must name one GPU per rank")
        configs = data.get("deepspeed_configs")
        if configs is not None:
            if not isinstance(configs, list) or len(configs) != len(shares) or not all(
                    isinstance(c, str) and 0 < len(c) <= MAX_PATH_CHARS for c in configs):
                raise ValueError("'deepspeed_configs' must name one config file per rank")
            if len({s.accumulation_steps for s in shares}) != 1:
                # ZeRO-2 aborts and ZeRO-3 hangs when ranks take different numbers of micro-steps
                raise ValueError("a DeepSpeed plan gives every rank the same accumulation steps")
        return cls(plan_id=str(data.get("plan_id", "")), global_batch=int(data["global_batch"]), shares=shares,
                   gpus=tuple(gpus) if gpus is not None else None, ranks_before=ranks_before,
                   deepspeed_configs=tuple(configs) if configs is not None else None)

    @classmethod
    def equal(cls, ranks: int, samples_per_rank: int, plan_id: str = "equal") -> RunPlan:
        return cls(plan_id, ranks * samples_per_rank, tuple(
            RankShare(rank, samples_per_rank, samples_per_rank, 1, 1.0) for rank in range(ranks)))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: readers poll these files."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def load_plan(path: str | Path) -> RunPlan:
    data = read_json(Path(path))
    if data is None:
        raise ValueError(f"{path}: cannot read the plan")
    return RunPlan.from_json(data)
