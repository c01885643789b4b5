"""One-line title, the selected GPU's detail, and the host panel: text built from a snapshot."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from gpumix.power.supplies import layout_from_json, loads
from gpumix.tui import format as fmt

SeriesFn = Callable[[int, str], list[float | None]]


# The title's clock says the minute of the newest snapshot: with seconds it rewrote the title every
# second, the most bytes of any line at 80x24 (37 of 166 B/s on one idle H200, issue 13). A snapshot
# that stops coming is said by the staleness watch (gpumix.tui.staleness), not by a frozen second.
CLOCK_FORMAT = "%H:%M"


def title_line(snapshot: dict[str, Any]) -> str:
    driver = snapshot["driver"]
    stamp_s = fmt.number(snapshot["timestamp_s"])
    try:
        clock = time.strftime(CLOCK_FORMAT, time.localtime(stamp_s)) if stamp_s is not None else fmt.NA
    except (OverflowError, OSError, ValueError):  # a time no calendar holds
        clock = fmt.NA
    counts = {}
    for finding in snapshot.get("findings", []):
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    worst = next((s for s in ("error", "warning", "info") if s in counts), None)
    mark = {"error": "✖", "warning": "▲", "info": "•"}.get(worst or "", "")
    advice = f"{mark} {sum(counts.values())} findings" if counts else "no findings"
    return (
        f"{fmt.plain(snapshot['hostname'])} · {fmt.plain(snapshot['source'])} · {fmt.plain(driver['driver_version'] or None)}"
        f" · CUDA {fmt.plain(driver['cuda_driver_version'] or None)} · {advice} · {clock}"
    )


def stale_line(age_s: float, reason: str | None) -> str:
    """The title while no snapshot comes: how long, and why (the client's last error)."""
    why = f" · {fmt.plain(reason, max_chars=200)}" if reason else ""
    return f"hub lost — reconnecting ({age_s:.0f} s){why}"


def frozen_line(age_s: float) -> str:
    """The title while the hub answers with the same readings (its sampler or the GPUs' driver hung)."""
    return f"hub answers, no new readings ({age_s:.0f} s)"


def run_line(snapshot: dict[str, Any]) -> str:
    """The training run at a glance: its pace and who holds it back."""
    run = snapshot.get("run")
    if not run:
        return no_run_line(snapshot.get("jobs") or {})
    # stragglers are rank numbers within the run's own job: look them up there (several jobs may report)
    ranks = {rank["rank"]: rank for rank in snapshot["ranks"] if rank.get("job") == run.get("job")
             and (run.get("job") is not None or rank.get("run_id") == run.get("run_id"))}
    tiers = {gpu["uuid"]: gpu["tier"] for gpu in snapshot["gpus"]}
    stragglers = run["stragglers"]
    who = ""
    if stragglers:
        names = sorted({fmt.plain(tiers.get(ranks[r]["gpu_uuid"], "?")) for r in stragglers if r in ranks})
        who = f" · straggler {','.join(map(fmt.plain, stragglers))} ({', '.join(names)})"
    others = len(snapshot.get("runs") or {}) - 1
    job = f"{fmt.plain(run.get('job') or 'unnamed')}: " if others > 0 else ""
    line = (f" {job}{fmt.plain(run['ranks'])} ranks · step {fmt.fixed(run['step_time_s'], 3)}s"
            f" · {fmt.fixed(run['samples_per_s'])} samples/s{who}{efficiency_field(run)}"
            + (f" · +{others} other jobs" if others > 0 else ""))
    busy = [f"{fmt.plain(job)}: {fmt.plain(status.get('message'))}" for job, status in snapshot.get("jobs", {}).items()
            if status.get("state") in ("stopping", "relaunching") or "aborted" in fmt.plain(status.get("message"))]
    return line + ("\n " + busy[0] if busy else "")


def efficiency_field(run: dict[str, Any]) -> str:
    """' · 71 % of Σ GPUs (equal 45 %, fast tier 52 %)': achieved against the GPUs' isolated sum
    (after the straggler: on a narrow terminal this is what gets cut)."""
    eff = run.get("efficiency")
    share = fmt.number(eff.get("share")) if isinstance(eff, dict) else None
    if share is None:
        return ""
    others = [f"{name} {fmt.number(eff.get(key)) * 100:.0f} %" for name, key in
              (("equal", "equal_split_share"), ("fast tier", "fast_tier_only_share")) if fmt.number(eff.get(key)) is not None]
    return f" · {share * 100:.0f} % of Σ GPUs" + (f" ({', '.join(others)})" if others else "")


WAITING_STATES = ("starting", "running", "stopping", "relaunching")  # a supervised job whose ranks are not up yet


def no_run_line(jobs: dict[str, Any]) -> str:
    """No rank reports: say what is true. A job under `gpumix run` that is starting or relaunching
    has no ranks yet; only without any such job is the agent missing."""
    for name, status in jobs.items():
        if isinstance(status, dict) and status.get("state") in WAITING_STATES:
            why = fmt.plain(status.get("message") or status.get("state"), max_chars=120)
            return f" {fmt.plain(name)}: waiting for the job's first steps ({why})"
    for name, status in jobs.items():
        if isinstance(status, dict) and status.get("state"):
            return f" {fmt.plain(name)}: {fmt.plain(status.get('state'))}, no ranks reporting" \
                   f" ({fmt.plain(status.get('message') or '', max_chars=120)})"
    return " no training ranks reporting (add gpumix.agent.start() to the training script)"


def power_line(snapshot: dict[str, Any]) -> str:
    """GPU power drawn and capped, summed, against the machine's budget."""
    gpus = [gpu for gpu in snapshot["gpus"] if not gpu["lost"]]
    draw = sum(fmt.number(gpu["power_w"]) or 0 for gpu in gpus)
    caps = sum(fmt.number(gpu["power_cap_w"]) or 0 for gpu in gpus)
    budget = fmt.number(snapshot.get("power_budget_w"))
    return f"GPU Σ {fmt.watts(draw)}/{fmt.watts(caps)} W" + (f" budget {fmt.watts(budget)}" if budget else "")


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


DETAIL_TEXT_LINES = 7  # the detail panel's lines before any chart (head ... uuid)
CHART_MIN_ROWS = 2  # a history chart is drawn only when it gets at least this many rows
CHART_LEVELS = "▁▂▃▄▅▆▇█"


def detail_text(gpu: dict[str, Any], series: SeriesFn, width: int = 78, height: int = DETAIL_TEXT_LINES) -> str:
    """The selected GPU in `height` lines of `width` columns (nothing cut: what does not fit
    comes later or is left out): readings with sparklines, clocks, why clocks are held, its
    processes, its UUID; with rows to spare, taller history charts."""
    index = gpu["index"]
    where = f" on {fmt.plain(gpu['node'])} (its GPU {fmt.plain(gpu['node_index'])})" if gpu.get("node") else ""  # several hubs
    head = f"GPU {fmt.plain(index)}{where} {fmt.plain(gpu['name'])} · {fmt.plain(gpu['pci_bus_id'] or None)}"
    uuid = f" uuid {fmt.plain(gpu['uuid'])}"
    if gpu["lost"]:
        lines = [head, " GPU is lost (NVML: GPU is lost): it fell off the bus or needs a reset.", uuid]
        return "\n".join(_fit(line, width) for line in lines[:max(1, height)])
    spark_width = max(4, min(40, (width - 56) // 2))  # the rx/tx line holds two sparklines and the link
    link_top = gpu["pcie_link_bytes_per_s_max"] or None
    util = fmt.held_spark(series(index, "util_gpu_pct"), spark_width, top=100)
    power = fmt.held_spark(series(index, "power_w"), spark_width, top=gpu["power_cap_w"] or None)
    rx = fmt.held_spark(series(index, "pcie_rx_bytes_per_s"), spark_width, top=link_top)
    tx = fmt.held_spark(series(index, "pcie_tx_bytes_per_s"), spark_width, top=link_top)
    reasons = ", ".join(map(fmt.plain, gpu["clock_event_reasons"] or [])) or "none"
    # whole kJ, as the wide table: 0.1 kJ moved every 1.3 s on an idle H200 (75 W), a rewrite each time
    energy = fmt.fixed(gpu["energy_j"], 0, scale=1 / 1000)
    energy = energy if energy == fmt.NA else energy + " kJ"
    lines = [
        head,
        f" util {util} {fmt.pct(gpu['util_gpu_pct']):>4}   power {power} {fmt.power_draw_cap(gpu['power_w'], gpu['power_cap_w'])}"
        f" ({fmt.watts(gpu['power_limit_min_w'])}–{fmt.watts(gpu['power_limit_max_w'])},"
        f" def {fmt.watts(gpu['power_limit_default_w'])})",
        f" rx   {rx} {fmt.rate(gpu['pcie_rx_bytes_per_s']):>4}/s tx    {tx} {fmt.rate(gpu['pcie_tx_bytes_per_s']):>4}/s"
        f"  link {fmt.link(gpu['pcie_link_gen_current'], gpu['pcie_link_width_current'])}"
        f" max {fmt.link(gpu['pcie_gen_max'], gpu['pcie_width_max'])} card g{fmt.plain(gpu['pcie_gen_max_gpu'] or '?')}",
        f" SM {fmt.mhz(gpu['clock_sm_mhz'])} MHz · mem {fmt.mhz(gpu['clock_mem_mhz'])} MHz · fan {fmt.pct(gpu['fan_pct'])}"
        f" · energy {energy} · PCIe replays {fmt.fixed(gpu['pcie_replay_count'])}",
        f" held by: {reasons}",
        " procs: " + process_summary(gpu["processes"]),
        uuid,
    ]
    lines = [_fit(line, width) for line in lines][:max(1, height)]
    lines += history_charts(gpu, series, width, height - len(lines))
    return "\n".join(lines)


def history_charts(gpu: dict[str, Any], series: SeriesFn, width: int, rows: int) -> list[str]:
    """Utilization and power, then PCIe RX and TX, side by side as charts `rows` tall in all,
    each on its fixed range (0–100 %, 0–cap, 0–the link's max): nothing when too few rows."""
    pair_rows = [(rows - 1) // 2, (rows - 1) // 2] if rows >= 2 * (CHART_MIN_ROWS + 1) + 1 else [rows - 1, 0]
    if pair_rows[0] < CHART_MIN_ROWS:
        return []
    index = gpu["index"]
    half = (width - 3) // 2
    link_top = fmt.number(gpu["pcie_link_bytes_per_s_max"])
    cap = fmt.number(gpu["power_cap_w"])
    pairs = [
        (("util %", "util_gpu_pct", 100.0, "0–100"), ("power W", "power_w", cap, f"0–{fmt.watts(cap)} W cap")),
        (("PCIe rx", "pcie_rx_bytes_per_s", link_top, f"0–{fmt.rate(link_top)}/s link"),
         ("PCIe tx", "pcie_tx_bytes_per_s", link_top, f"0–{fmt.rate(link_top)}/s link")),
    ]
    lines = [""]
    for (left, right), chart_rows in zip(pairs, pair_rows, strict=True):
        if chart_rows < CHART_MIN_ROWS:
            break
        blocks = []
        for name, field, top, scale in (left, right):
            values = series(index, field)[-half:]
            blocks.append([_fit(f"{name} ({scale}, last {len(values)} samples)", half),
                           *chart_block(values, half, chart_rows - 1, top)])
        lines += [f"{a:<{half}}   {b}".rstrip() for a, b in zip(*blocks, strict=True)]
    return lines


def chart_block(values: list[float | None], width: int, rows: int, top: float | None) -> list[str]:
    """The last `width` values as bars `rows` tall, eighths of a row each, scaled 0..`top`
    (no top known: nothing drawn rather than a guessed scale). The dashboard's charts redraw
    every snapshot from a history renewed every few (gpumix.tui.held_history): the same
    values give the lines drawn last time (a sixth of the idle dashboard's work at 160x48)."""
    # finite floats or None (gaps) first: hashable, and True is not taken for the 1 it equals; a
    # history of such values as it is (one `number` per value was most of the charts' calls)
    tail = values[-width:]
    recent = fmt.finite_floats(tail)
    if recent is None:
        recent = tuple(fmt.number(v) for v in tail)
    return list(_chart_lines(recent, width, rows, fmt.number(top)))


@functools.lru_cache(maxsize=16)  # 4 charts of the selected GPU, and a few sizes
def _chart_lines(recent: tuple[float | None, ...], width: int, rows: int, top: float | None) -> tuple[str, ...]:
    if not top or top <= 0:
        return ("",) * rows
    # each value's height in eighths of a row, 0 to rows * 8 (a gap: 0); clamped by comparisons, not
    # min/max calls: a chart is a few hundred values, drawn again whenever its history moves
    eighths = [0 if v is None else round((0.0 if f <= 0.0 else 1.0 if f >= 1.0 else f) * rows * 8)
               for v in recent for f in (0.0 if v is None else v / top,)]
    # a cell `filled` eighths above its row's bottom, looked up at filled + rows * 8: blank at 0 and below,
    # a partial block from 1 to 7, full from 8 on
    cells = " " * (rows * 8 + 1) + CHART_LEVELS[:-1] + CHART_LEVELS[-1] * (rows * 8)
    return tuple("".join([cells[level - row * 8 + rows * 8] for level in eighths]).rjust(width)
                 for row in range(rows - 1, -1, -1))


def process_summary(processes: list[dict[str, Any]]) -> str:
    if not processes:
        return "none"
    parts = []
    for proc in processes[:4]:
        parts.append(
            f"{fmt.plain(proc['pid'])} {fmt.plain(proc['name'] or '?')} {fmt.pct(proc['cpu_pct'])} cpu"
            f" {fmt.gib(proc['rss_bytes'])}G rss {fmt.gib(proc['gpu_mem_bytes'])}G gpu"
        )
    more = f" +{len(processes) - 4} more" if len(processes) > 4 else ""
    return " · ".join(parts) + more


def supplies_line(snapshot: dict[str, Any], width: int = 78) -> str | None:
    """Each supply's and wall circuit's load now against its limit, most loaded first ("!": the
    caps add up above its usable limit); None when the machine declares no supplies."""
    layout = layout_from_json(snapshot.get("power_layout"), len(snapshot["gpus"]))
    if layout is None:
        return None
    rows = sorted(loads(layout, snapshot["gpus"]), key=lambda r: -r["draw_w"] / r["limit_w"])
    parts = [f"{fmt.plain(r['name'])} {fmt.watts(r['draw_w'])}/{fmt.watts(r['limit_w'])}W"
             + ("!" if r["caps_w"] > r["usable_w"] else "") for r in rows]
    return _fit("PSU " + " · ".join(parts), width)


def host_text(snapshot: dict[str, Any], width: int = 78) -> str:
    host = snapshot["host"]
    supplies = supplies_line(snapshot, width)
    if host is None:
        return "host: N/A\n" + power_line(snapshot) + (f"\n{supplies}" if supplies else "")
    cores = host["cpu_per_core_pct"]
    bars = fmt.spark(cores, min(len(cores), max(8, width - 40)), top=100)
    load = " ".join(fmt.fixed(value, 1) for value in host["load_avg"])
    used, total = fmt.number(host["mem_used_bytes"]), fmt.number(host["mem_total_bytes"])
    return (
        f"CPU {fmt.pct(host['cpu_pct']):>4} {bars} ({len(cores)} cores)  load {load}\n"
        f"RAM {fmt.mem_used_total(used, total)} "
        f"{fmt.bar(used / total if used is not None and total else None, 10)}  "
        f"swap {fmt.mem_used_total(host['swap_used_bytes'], host['swap_total_bytes'])}  {power_line(snapshot)}"
        + (f"\n{supplies}" if supplies else "")
    )
