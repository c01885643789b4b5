"""The field's lessons as findings: DataParallel, uneven memory, launch-bound steps, mixed precision,
and supplies or circuits whose caps add up above their limit.

Sources: a dual-card fine-tuning guide (DataParallel is one process behind the GIL that scatters and
gathers through the first GPU; memory lands unevenly; small batches make kernel launches the
bottleneck; a GradScaler starts at 65536 and should settle) and a 10-GPU 3060/3090/4090 build (several
supplies, per-card caps so that no supply and no wall circuit trips, 4090 bursts above their cap).
Pure functions of a snapshot; each finding says what it saw, in figures.
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpumix.advice.finding import Finding
from gpumix.power.supplies import PowerLayout, layout_from_json, loads

GIB = 1024**3
DP_MIN_MEM_BYTES = 1 * GIB  # a stray CUDA context (a DDP rank touching GPU 0) holds ~0.3-0.5 GiB
UNEVEN_RATIO = 1.25  # used memory this far above what the split explains
UNEVEN_MIN_BYTES = 1 * GIB
LAUNCH_STEP_S = 0.05  # a step this short is a few kernel launches' worth of work
LAUNCH_UTIL_PCT = 60.0
LAUNCH_CPU_PCT = 85.0  # of one core: the Python thread that launches kernels is busy
LAUNCH_WAIT_SHARE = 0.20  # more waiting than this: the loader or the all-reduce, not launches
MEMORY_MARGIN = 0.10  # as the planner's memory model (gpumix.plan.planner.micro_batch_cap)
SCALE_COLLAPSED = 1.0  # a GradScaler starts at 65536; at or below 1 fp16 gradients underflow
SKIPPED_SHARE_BAD = 0.05  # a healthy scaler skips about one step in 2000 (its growth interval)
SKIPPED_MIN_STEPS = 20
# Cards with tensor cores: every GeForce RTX, and the data-centre parts of Volta and later.
TENSOR_CORES = re.compile(r"RTX|TITAN V|V100|T4\b|A2\b|A10|A16|A30|A40|A100|A800|L4|L20|L40|H100|H200|H800|B100|B200|GB")
TEXT_CHARS = 120  # a process's name or command in evidence


def _gib(value: float | None) -> str:
    return "N/A" if value is None else f"{value / GIB:.1f} GiB"


def _short(text: Any) -> str:
    value = str(text or "?")
    clean = "".join(ch if ch.isprintable() else "?" for ch in value)
    return clean if len(clean) <= TEXT_CHARS else clean[:TEXT_CHARS - 1] + "…"


def _num(value: Any) -> float | None:
    kind = type(value)
    if kind is float:  # the usual figure: one check (a NaN or inf is no figure)
        return value if value - value == 0.0 else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _live_ranks(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in snapshot.get("ranks") or [] if r.get("connected")]


def _gpu_by_uuid(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["uuid"]: g for g in snapshot.get("gpus") or [] if not g.get("lost")}


# -- DataParallel ---------------------------------------------------------------------------------


def _multi_gpu_processes(snapshot: dict[str, Any]) -> dict[int, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """pid -> [(gpu row, process row)] for each process holding real memory on several GPUs."""
    seen: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for gpu in snapshot.get("gpus") or []:
        if gpu.get("lost"):
            continue
        for process in gpu.get("processes") or []:
            mem = _num(process.get("gpu_mem_bytes"))
            if isinstance(process.get("pid"), int) and mem is not None and mem >= DP_MIN_MEM_BYTES:
                seen.setdefault(process["pid"], []).append((gpu, process))
    return {pid: rows for pid, rows in seen.items() if len(rows) >= 2}


def _torchrun_line(count: int, command: Any) -> str:
    script = next((part for part in str(command or "").split() if part.endswith(".py")), "train.py")
    return f"torchrun --standalone --nproc_per_node={count} {_short(script)}"


def data_parallel(snapshot: dict[str, Any], live: list[dict[str, Any]] | None = None) -> list[Finding]:
    """`live`: _live_ranks(snapshot), where the caller has it."""
    found = []
    live = _live_ranks(snapshot) if live is None else live
    multi = _multi_gpu_processes(snapshot)
    ddp_pids = {r.get("pid") for r in live if (r.get("world_size") or 1) > 1} if multi else set()
    for pid, rows in sorted(multi.items()):
        if pid in ddp_pids:  # a DDP rank also touching another GPU: not DataParallel
            continue
        process = rows[0][1]
        gpus = [g["index"] for g, _ in rows]
        per_gpu = ", ".join(f"GPU {g['index']} {_gib(p.get('gpu_mem_bytes'))}" for g, p in rows)
        found.append(Finding(
            "data-parallel", "warning", f"One process trains on {len(rows)} GPUs (DataParallel)",
            f"process {pid} ({_short(process.get('name'))}: {_short(process.get('command'))}) holds memory on"
            f" {per_gpu} (NVML's process lists)",
            "torch.nn.DataParallel runs one Python thread behind the GIL and scatters inputs and gathers"
            " outputs through the first GPU. Use DDP, one process per GPU: wrap the model in"
            " DistributedDataParallel(model, device_ids=[local_rank]) and launch with"
            f" `{_torchrun_line(len(rows), process.get('command'))}`.", gpus))
    for rank in live:
        devices = rank.get("dp_devices")
        if devices is None:  # the usual rank: no DataParallel seen
            continue
        devices = _num(devices)
        if devices is None or devices < 2 or rank.get("pid") in multi:
            continue
        found.append(Finding(
            "data-parallel", "warning", f"One process trains on {devices:.0f} GPUs (DataParallel)",
            f"rank {rank['rank']} (process {rank.get('pid')}) wraps its model in torch.nn.DataParallel over"
            f" {devices:.0f} devices (seen by the agent)",
            "Use DDP, one process per GPU: DistributedDataParallel(model, device_ids=[local_rank]), launched with"
            f" `{_torchrun_line(int(devices), None)}`.", []))
    return found


# -- uneven memory ---------------------------------------------------------------------------------


def job_groups(ranks: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for rank in ranks:
        key = (rank.get("job"), rank.get("run_id") if rank.get("job") is None else None)
        groups.setdefault(key, []).append(rank)
    return groups


def _unexplained(members: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """(label, memory, samples) whose memory exceeds what their share explains: memory grows at most in
    proportion to the samples (weights and optimizer state do not grow at all), so against the rank
    with least memory, one holding more than UNEVEN_RATIO times that scaled by its samples is uneven."""
    low = min(members, key=lambda m: m[1])
    flagged = []
    for label, mem, samples in members:
        bound = low[1] * max(1.0, samples / low[2]) if low[2] > 0 else low[1]
        if mem > UNEVEN_RATIO * bound and mem - bound >= UNEVEN_MIN_BYTES:
            flagged.append((label, mem, samples))
    return flagged


def uneven_memory(snapshot: dict[str, Any], live: list[dict[str, Any]] | None = None,
                  by_uuid: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """`live`, `by_uuid`: _live_ranks(snapshot) and _gpu_by_uuid(snapshot), where the caller has them."""
    found = []
    by_uuid = _gpu_by_uuid(snapshot) if by_uuid is None else by_uuid
    live = _live_ranks(snapshot) if live is None else live
    for (job, run_id), ranks in sorted(job_groups(live).items(), key=lambda kv: str(kv[0])) if len(live) > 1 else ():
        measured = []  # (rank, gpu, memory, samples): labels are made only for a finding (issue 13)
        for rank in ranks:
            gpu = by_uuid.get(rank.get("gpu_uuid"))
            mem = _num(gpu.get("mem_used_bytes")) if gpu else None
            mem = mem if mem is not None else _num(rank.get("mem_peak_bytes"))
            if mem is not None and mem > 0:
                samples = _num(rank.get("samples")) or _num(rank.get("micro_batch")) or 1.0
                measured.append((rank, gpu, mem, samples))
        if len(measured) < 2 or not _unexplained([(str(i), m, n) for i, (_, _, m, n) in enumerate(measured)]):
            continue
        members = [(f"rank {rank['rank']}" + (f" (GPU {gpu['index']})" if gpu else ""), mem, samples,
                    gpu["index"] if gpu else None) for rank, gpu, mem, samples in measured]
        flagged = _unexplained([(m[0], m[1], m[2]) for m in members])
        figures = ", ".join(f"{label} {_gib(mem)} at {samples:g} samples" for label, mem, samples, _ in members)
        found.append(Finding(
            "uneven-memory", "warning", f"Memory lands unevenly across job {job or run_id or '(unnamed)'}'s GPUs",
            f"{figures}; {', '.join(f[0] for f in flagged)} hold more than {UNEVEN_RATIO:g}x what their share"
            " of the batch explains",
            "Look for work gathered on one rank (outputs or metrics collected to rank 0, a model built on"
            " cuda:0 before moving it, torch.cuda.set_device missing so every rank touches GPU 0) or a leak"
            " on that rank (tensors kept across steps, e.g. a loss appended without .item()).",
            sorted(m[3] for m in members if m[3] is not None and any(m[0] == f[0] for f in flagged))))
    for pid, rows in sorted(_multi_gpu_processes(snapshot).items()):  # DataParallel: one process, even split
        members = [(f"GPU {g['index']}", float(p["gpu_mem_bytes"]), 1.0) for g, p in rows]
        flagged = _unexplained(members)
        if flagged:
            found.append(Finding(
                "uneven-memory", "warning", f"Process {pid}'s memory lands unevenly across its GPUs",
                ", ".join(f"{label} {_gib(mem)}" for label, mem, _ in members)
                + f"; {', '.join(f[0] for f in flagged)} hold more than {UNEVEN_RATIO:g}x the least loaded",
                "DataParallel gathers outputs and keeps the master weights on the first GPU: move to DDP"
                " (one process per GPU), which spreads memory evenly.",
                sorted(g["index"] for g, _ in rows)))
    return found


# -- launch-bound steps ------------------------------------------------------------------------------


def _micro_batch_allowed(rank: dict[str, Any], gpu: dict[str, Any] | None) -> int | None:
    """The largest micro-batch the planner's memory model allows (the whole peak taken to grow with
    the micro-batch: safe), or None without the figures."""
    micro = _num(rank.get("micro_batch"))
    peak = _num(rank.get("mem_peak_bytes"))
    total = _num(gpu.get("mem_total_bytes")) if gpu else None
    if not micro or not peak or not total:
        return None
    return max(int(micro), math.floor(total * (1.0 - MEMORY_MARGIN) * micro / peak))


def launch_bound(snapshot: dict[str, Any], live: list[dict[str, Any]] | None = None,
                 by_uuid: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """`live`, `by_uuid`: _live_ranks(snapshot) and _gpu_by_uuid(snapshot), where the caller has them."""
    found = []
    by_uuid = _gpu_by_uuid(snapshot) if by_uuid is None else by_uuid
    for rank in _live_ranks(snapshot) if live is None else live:
        cpu = _num(rank.get("cpu_pct"))
        if cpu is None or not cpu >= LAUNCH_CPU_PCT:  # the usual rank, decided on one figure (issue 13)
            continue
        gpu = by_uuid.get(rank.get("gpu_uuid"))
        step_s = _num(rank.get("step_time_s"))
        util = _num(gpu.get("util_gpu_pct")) if gpu else None
        waits = (_num(rank.get("comm_share")) or 0.0) + (_num(rank.get("data_wait_share")) or 0.0)
        if None in (step_s, cpu, util) or not (step_s < LAUNCH_STEP_S and util < LAUNCH_UTIL_PCT
                                               and cpu >= LAUNCH_CPU_PCT and waits < LAUNCH_WAIT_SHARE):
            continue
        micro = _num(rank.get("micro_batch"))
        allowed = _micro_batch_allowed(rank, gpu)
        larger = (f"a larger micro-batch (memory allows up to {allowed} where it runs {micro:g},"
                  " by the planner's memory model)" if allowed and micro and allowed > micro
                  else "a larger micro-batch")
        found.append(Finding(
            "launch-bound", "warning", f"Rank {rank['rank']}'s steps are bound by kernel launches",
            f"steps of {1000 * step_s:.1f} ms, GPU {gpu['index']} busy {util:.0f} % while the rank's process"
            f" uses {cpu:.0f} % of a core; it waits {100 * waits:.0f} % of the step for data and the all-reduce",
            f"The CPU cannot launch kernels as fast as the GPU runs them: {larger}, gradient accumulation"
            " with fewer, larger micro-batches, or CUDA Graphs (torch.compile(mode=\"reduce-overhead\")).",
            [gpu["index"]]))
    return found


# -- mixed precision -------------------------------------------------------------------------------------


def mixed_precision(snapshot: dict[str, Any], live: list[dict[str, Any]] | None = None,
                    by_uuid: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """`live`, `by_uuid`: _live_ranks(snapshot) and _gpu_by_uuid(snapshot), where the caller has them."""
    found = []
    by_uuid = _gpu_by_uuid(snapshot) if by_uuid is None else by_uuid
    fp32: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for rank in _live_ranks(snapshot) if live is None else live:
        autocast, scale, skipped = rank.get("amp_autocast"), rank.get("loss_scale"), rank.get("amp_skipped_share")
        if autocast is None and scale is None and skipped is None:  # no AMP figure: nothing to say (issue 13)
            continue
        gpu = by_uuid.get(rank.get("gpu_uuid"))
        if autocast == 0 and gpu and TENSOR_CORES.search(str(gpu.get("name") or "")):
            fp32.append((rank, gpu))
        scale, skipped = _num(scale), _num(skipped)
        window = _num(rank.get("amp_window_steps")) or 0.0
        collapsed = scale is not None and scale <= SCALE_COLLAPSED
        skipping = skipped is not None and window >= SKIPPED_MIN_STEPS and skipped >= SKIPPED_SHARE_BAD
        if collapsed or skipping:
            facts = []
            if scale is not None:
                facts.append(f"loss scale {scale:g} (a GradScaler starts at 65536)")
            if skipped is not None:
                facts.append(f"{100 * skipped:.0f} % of the last {window:.0f} steps skipped for inf/NaN gradients")
            if _num(rank.get("amp_skipped_steps")) is not None:
                facts.append(f"{rank['amp_skipped_steps']:.0f} skipped in all")
            found.append(Finding(
                "loss-scale-collapsing", "error" if collapsed else "warning",
                f"Rank {rank['rank']}'s loss scale keeps collapsing",
                "; ".join(facts) + f" ({_short(rank.get('amp_dtype') or 'float16')} autocast)",
                "fp16 gradients overflow on most steps, so the optimizer skips them. Train in bfloat16 on"
                " Ampere and later (torch.autocast(dtype=torch.bfloat16), no GradScaler needed); otherwise look"
                " for NaN/inf in the data or loss, lower the learning rate, clip gradients after"
                " scaler.unscale_(optimizer).", [gpu["index"]] if gpu else []))
    if fp32:
        ranks = ", ".join(f"rank {r['rank']} on GPU {g['index']} ({_short(g.get('name'))})" for r, g in fp32)
        found.append(Finding(
            "fp32-on-tensor-cores", "info", "Training in fp32 on cards with tensor cores",
            f"{ranks}: autocast is off (reported by the agent)",
            "Mixed precision runs matrix maths on the tensor cores: wrap the forward pass in"
            " torch.autocast('cuda', dtype=torch.bfloat16) (Ampere and later; fp16 with a GradScaler on older"
            " cards), or at least allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True).",
            sorted(g["index"] for _, g in fp32)))
    return found


# -- supplies and circuits ------------------------------------------------------------------------------


def power_wiring(snapshot: dict[str, Any], layout: PowerLayout | None = None) -> list[Finding]:
    layout = layout or layout_from_json(snapshot.get("power_layout"), len(snapshot.get("gpus") or []))
    if layout is None:
        return []
    found = []
    for row in loads(layout, snapshot.get("gpus") or []):
        over_limit = row["caps_w"] > row["limit_w"]
        if not over_limit and row["caps_w"] <= row["usable_w"]:
            continue
        what = "supply" if row["kind"] == "supply" else "wall circuit"
        limit = (f"its {row['limit_w']:.0f} W rating" if row["kind"] == "supply"
                 else f"its {row['limit_w']:.0f} W continuous limit")
        found.append(Finding(
            f"{row['kind']}-over-limit", "error" if over_limit else "warning",
            f"Caps on {what} {_short(row['name'])} add up {'above its limit' if over_limit else 'into its headroom'}",
            f"at their caps its GPUs ({', '.join(map(str, row['gpus']))}) would load it with {row['caps_w']:.0f} W"
            f" (draw now {row['draw_w']:.0f} W) against {limit}, {row['usable_w']:.0f} W usable with"
            f" {100 * layout.headroom:.0f} % headroom for transients",
            "Fit the caps to every supply and circuit at once: `b` in gpumix-top or `gpumix power fit`"
            " (it respects each limit with the headroom); or move a card's cables to a supply with room."
            " 4090s draw short bursts far above their cap: keep the headroom.", row["gpus"]))
    return found


def field_findings(snapshot: dict[str, Any], layout: PowerLayout | None = None) -> list[Finding]:
    # the live ranks and the GPUs by UUID made once for all, not once per lesson (issue 13)
    live, by_uuid = _live_ranks(snapshot), _gpu_by_uuid(snapshot)
    return [*data_parallel(snapshot, live), *uneven_memory(snapshot, live, by_uuid),
            *launch_bound(snapshot, live, by_uuid), *mixed_precision(snapshot, live, by_uuid),
            *power_wiring(snapshot, layout)]

