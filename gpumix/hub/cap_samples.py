"""Per-cap samples: what each GPU's rank computed at each power cap the hub has seen.

The power fit learns a card's power -> throughput curve from these (gpumix.power.budget): at the
same split (samples per step), compute seconds per step at each cap. Every step a rank reports is
filed under the cap its GPU had at the last hardware tick; a step that straddles a cap change lands
under one of them, so each figure is a median of the last steps at that cap.

Bounded: MAX_GPUS GPUs, MAX_KEYS_PER_GPU (split, cap) pairs per GPU (the least recently seen goes
first), STEPS_PER_KEY steps each; a pair not seen for MAX_AGE_S is forgotten (another load on the
GPU, or another model, may run by then): at each tick and each view, not at each step (issue 13).
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from gpumix.power.budget import same_cap

MAX_GPUS = 64
MAX_KEYS_PER_GPU = 32
STEPS_PER_KEY = 16  # steps behind one (split, cap) figure: the median is robust to the straddling step
MIN_STEPS = 3  # a figure needs this many steps at its cap
MAX_AGE_S = 1800.0
CAP_RESOLUTION_W = 1.0  # caps closer than this are one cap (NVML reports milliwatts)


@dataclass
class _Samples:
    compute_s: deque[float] = field(default_factory=lambda: deque(maxlen=STEPS_PER_KEY))
    step_s: deque[float] = field(default_factory=lambda: deque(maxlen=STEPS_PER_KEY))
    last_seen_s: float = 0.0


class CapSamples:
    """uuid -> (samples per step, cap W) -> the last steps' compute and step seconds. Not thread-safe:
    the hub calls it under its lock."""

    def __init__(self) -> None:
        self._by_gpu: OrderedDict[str, OrderedDict[tuple[int, float], _Samples]] = OrderedDict()

    def add(self, uuid: str | None, cap_w: float | None, samples: float | None, compute_s: float,
            step_s: float, now_s: float) -> None:
        """One step of a rank on GPU `uuid`, at the cap `cap_w` its GPU had when the step arrived."""
        if uuid is None or cap_w is None or samples is None:
            return
        if not (_finite(cap_w, 1.0, 10_000.0) and _finite(samples, 1.0, 1e7) and _finite(compute_s, 0.0, 1e6)
                and _finite(step_s, 1e-9, 1e6)) or compute_s <= 0:
            return
        entry = self._pair(uuid, (int(samples), round(cap_w / CAP_RESOLUTION_W) * CAP_RESOLUTION_W), now_s)
        entry.compute_s.append(compute_s)
        entry.step_s.append(step_s)
        entry.last_seen_s = now_s

    def _pair(self, uuid: str, key: tuple[int, float], now_s: float) -> _Samples:
        """The (samples, cap) pair's samples on GPU `uuid`, made (or reset, if stale) as needed; the GPU and
        the pair moved last (the newest), the oldest GPUs and pairs beyond the bounds dropped."""
        gpu = self._by_gpu.get(uuid)
        if gpu is None:
            if len(self._by_gpu) >= MAX_GPUS:
                self._by_gpu.popitem(last=False)
            gpu = self._by_gpu[uuid] = OrderedDict()
        self._by_gpu.move_to_end(uuid)
        entry = gpu.get(key)
        if entry is not None and now_s - entry.last_seen_s > MAX_AGE_S:  # what expire() would have dropped
            del gpu[key]
            entry = None
        if entry is None:
            if len(gpu) >= MAX_KEYS_PER_GPU:
                gpu.popitem(last=False)
            entry = gpu[key] = _Samples()
        gpu.move_to_end(key)
        return entry

    def add_many(self, uuid: str | None, cap_w: float | None, rows: list[tuple[float | None, float, float]],
                 now_s: float) -> None:
        """add(uuid, cap_w, samples, compute_s, step_s, now_s) for each row (samples, compute_s, step_s), in
        order, with the GPU and its cap looked at once: one agent write's steps (issue 13). The rows' figures
        are a parsed step's (finite floats, or None), so plain comparisons check them as add() does."""
        if uuid is None or cap_w is None or not _finite(cap_w, 1.0, 10_000.0):
            return
        rows = [row for row in rows if row[0] is not None and 1.0 <= row[0] <= 1e7  # type: ignore[operator]
                and 0.0 < row[1] <= 1e6 and 1e-9 <= row[2] <= 1e6]
        if not rows:
            return
        cap_key = round(cap_w / CAP_RESOLUTION_W) * CAP_RESOLUTION_W
        if len({row[0] for row in rows}) == 1:  # the usual write: one share for all its steps, one pair
            entry = self._pair(uuid, (int(rows[0][0]), cap_key), now_s)  # type: ignore[arg-type]
            entry.last_seen_s = now_s
            entry.compute_s.extend([row[1] for row in rows])
            entry.step_s.extend([row[2] for row in rows])
            return
        last_key: tuple[int, float] | None = None
        entry: _Samples | None = None
        for samples, compute_s, step_s in rows:
            key = (int(samples), cap_key)  # type: ignore[arg-type]
            if key != last_key or entry is None:
                # the GPU's and the pair's bookkeeping, as add() does (the row was checked above: issue 13)
                last_key, entry = key, self._pair(uuid, key, now_s)  # type: ignore[arg-type]
                entry.last_seen_s = now_s
            entry.compute_s.append(compute_s)  # the same pair as the row before: just seen, already last
            entry.step_s.append(step_s)

    def expire(self, now_s: float) -> None:
        """Forget the pairs not seen for MAX_AGE_S (the hub calls it each tick, not each step: a stale
        pair a step touches is reset there, and view() expires first, so what shows is the same)."""
        for uuid in list(self._by_gpu):
            gpu = self._by_gpu[uuid]
            for key in [k for k, e in gpu.items() if now_s - e.last_seen_s > MAX_AGE_S]:
                del gpu[key]
            if not gpu:
                del self._by_gpu[uuid]

    def view(self, now_s: float, off_caps_w: dict[str, float | None] | None = None
             ) -> dict[str, list[dict[str, Any]]]:
        """uuid -> [{cap_w, samples, compute_s, samples_per_s, steps, age_s}], figures with MIN_STEPS
        steps or more: the power fit's input (gpumix.power.snapshot_inputs.gpu_power_from_snapshot).
        `off_caps_w` (uuid -> cap now): only the figures at another cap than the GPU's now (a GPU without
        a cap there: all of them), left out before their medians are taken: what the hub's snapshot
        carries each tick, which on a box whose caps never changed is nothing (issue 13)."""
        self.expire(now_s)
        result: dict[str, list[dict[str, Any]]] = {}
        for uuid, gpu in self._by_gpu.items():
            rows = []
            cap_now_w = off_caps_w.get(uuid) if off_caps_w is not None else None
            for (samples, cap_w), entry in sorted(gpu.items()):
                if len(entry.compute_s) < MIN_STEPS or (cap_now_w is not None and same_cap(cap_w, cap_now_w)):
                    continue
                step_s = statistics.median(entry.step_s)
                rows.append({"cap_w": cap_w, "samples": samples, "compute_s": statistics.median(entry.compute_s),
                             "samples_per_s": samples / step_s, "steps": len(entry.compute_s),
                             "age_s": max(0.0, now_s - entry.last_seen_s)})
            if rows:
                result[uuid] = rows
        return result


def _finite(value: float, low: float, high: float) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and low <= value <= high
