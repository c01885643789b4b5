"""A plan in DeepSpeed's terms: one config per rank.

DeepSpeed takes one micro-batch size per process (train_micro_batch_size_per_gpu)
and its accumulation steps. ZeRO-2 reduces gradients at every micro-step, so
every rank must take the same number of micro-steps k per optimizer step
(measured: a different k deadlocks on a collective mismatch); the split then
lives in the micro-batch: n_r = m_r * k. DeepSpeed divides each micro-step's
loss by k itself, so each micro-batch's mean loss is scaled by n_r * R / B,
the same loss weight as under DDP.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any


def common_accumulation(global_batch: int, needed: int) -> int:
    """The smallest k >= needed that divides B (every micro-step then holds B / k samples).
    The divisors come in pairs up to sqrt(B): a prime B costs sqrt(B) steps, not B."""
    divisors = {d for low in range(1, math.isqrt(global_batch) + 1) if global_batch % low == 0
                for d in (low, global_batch // low)}
    return min((k for k in divisors if k >= max(1, needed)), default=global_batch)


def _round_shares(total: int, shares: list[float]) -> list[int]:
    """Largest-remainder rounding to integers >= 1 that add up to total."""
    floors = [max(1, int(share)) for share in shares]
    order = sorted(range(len(shares)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    while sum(floors) < total:
        for i in order:
            if sum(floors) == total:
                break
            floors[i] += 1
    while sum(floors) > total:  # only where a rank keeps at least 1 (total >= len(shares) is checked)
        i = max((j for j in range(len(floors)) if floors[j] > 1), key=lambda j: floors[j] - shares[j])
        floors[i] -= 1
    return floors


def deepspeed_split(plan: dict[str, Any]) -> dict[str, Any]:
    """From the planner's JSON: a common k and per-rank m_r (n_r = m_r * k), with loss weights.
    Ranks the plan leaves out (0 samples) are dropped and the rest renumbered, as the relaunch does."""
    ranks = [{**r, "rank": new} for new, r in
             enumerate(r for r in sorted(plan["ranks"], key=lambda r: r["rank"]) if r["samples"] > 0)]
    B, R = plan["global_batch"], len(ranks)
    if B < R:
        raise ValueError("the global batch is smaller than the number of ranks")
    k = common_accumulation(B, max(r["accumulation_steps"] for r in ranks))
    if B // k < R:
        raise ValueError(f"with {k} accumulation steps a micro-step holds {B // k} samples: fewer than the {R} ranks")
    micro = _round_shares(B // k, [r["samples"] / k for r in ranks])
    return {
        "global_batch": B, "accumulation_steps": k,
        "ranks": [{"rank": r["rank"], "samples": m * k, "micro_batch": m, "accumulation_steps": k,
                   "loss_weight": m * k * R / B} for r, m in zip(ranks, micro, strict=True)],
    }


def write_configs(split: dict[str, Any], base_config: dict[str, Any], folder: Path) -> list[Path]:
    """ds_config_rank{r}.json per rank: the user's config with this rank's batch settings."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks = split["ranks"]
    paths = []
    for rank in ranks:
        config = copy.deepcopy(base_config)
        config["train_micro_batch_size_per_gpu"] = rank["micro_batch"]
        config["gradient_accumulation_steps"] = rank["accumulation_steps"]
        # DeepSpeed checks micro * accumulation * world == train_batch_size on each rank
        config["train_batch_size"] = rank["micro_batch"] * rank["accumulation_steps"] * len(ranks)
        path = folder / f"ds_config_rank{rank['rank']}.json"
        path.write_text(json.dumps(config, indent=1))
        paths.append(path)
    return paths
