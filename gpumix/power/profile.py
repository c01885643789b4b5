"""`gpumix power profile TIER`: step one tier's caps down while training runs, measure, restore.

Opt-in, and bounded: at most MAX_STEPS steps, each at most MAX_STEP_SHARE of the card's default
limit below the cap before it, never below the card's minimum, each held `hold_s`. Steps are shares of
the default limit, not of the settable range: speed under a cap follows the cap's share of the default
limit (the prior's (cap/default)^0.25, the published curves), so equal shares sample the same part of
every card's curve. Shares of the range stepped a 5070 Ti (250-350 W) 10 W at a time and a 4090
(150-600 W) 45 W: neither reached the caps the fit picks (docs/power.md, "Against an oracle"). Every cap change
goes through the hub's power control (checked, audit-logged, refused for a read-only client), and
the original caps are put back on completion, on an error, on SIGINT/SIGTERM (the CLI turns them into
exceptions) and when the hub stops answering (retried until it answers again, for at most
`restore_wait_s`: a real card keeps its cap across a hub restart). While it runs, the hub files each
step under the cap in force (gpumix.hub.cap_samples), so `gpumix power fit` learns the tier's curve.

A dry run prints the steps it would take and sends no control at all: no cap changes, no audit line.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumix.power.profile_limits import (  # noqa: F401  (the defaults too: benchmarks/oracle_replan.py reads them here)
    DEFAULT_HOLD_S,
    DEFAULT_STEP_SHARE,
    DEFAULT_STEPS,
    MAX_HOLD_S,
    MAX_STEP_SHARE,
    MAX_STEPS,
    RESTORE_WAIT_S,
)
from gpumix.wire.snapshot_types import Snapshot, Source

MIN_STEPS_AT_CAP = 6  # the hub's figures are medians of 10 steps (MEDIAN_WINDOW): 6 at the cap make them its
POLL_S = 0.2


class ProfileError(Exception):
    """The profile stopped or was refused; str() is the one line shown."""


class HubLost(ProfileError):
    """The hub stopped answering during the profile."""


@dataclass
class ProfileRun:
    tier: str
    gpus: list[int]
    original_caps_w: dict[int, float]
    steps: list[dict[int, float]]
    hold_s: float
    measured: list[dict[str, Any]] = field(default_factory=list)  # the baseline, then one per step
    restored: bool | None = None  # None: nothing was changed

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "gpus": self.gpus,
                "original_caps_w": {str(i): w for i, w in self.original_caps_w.items()},
                "steps": [{"caps_w": {str(i): w for i, w in caps.items()}, "hold_s": self.hold_s} for caps in self.steps],
                "measured": self.measured, "restored": self.restored}


def _normal(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def tier_gpus(snapshot: Snapshot, tier: str) -> tuple[str, list[dict[str, Any]]]:
    """The tier named (exactly, or by its model: `rtx3090` names "RTX 3090 24G") and its live GPUs."""
    tiers = sorted({g["tier"] for g in snapshot["gpus"]})
    wanted = _normal(tier)
    matches = [t for t in tiers if _normal(t) == wanted] or [t for t in tiers if wanted and _normal(t).startswith(wanted)]
    if len(matches) != 1:
        known = ", ".join(repr(t) for t in tiers) or "none"
        raise ProfileError(f"{'no' if not matches else 'more than one'} tier matches {tier[:60]!r} (tiers: {known})")
    gpus = [g for g in snapshot["gpus"] if g["tier"] == matches[0] and not g["lost"]]
    for gpu in gpus:
        if None in (gpu["power_cap_w"], gpu["power_limit_min_w"], gpu["power_limit_max_w"]):
            raise ProfileError(f"GPU {gpu['index']} does not report its power cap and range: it cannot be profiled")
    if not gpus:
        raise ProfileError(f"tier {matches[0]!r} has no GPU that answers")
    return matches[0], gpus


def profile_steps(gpus: list[dict[str, Any]], steps: int, share: float) -> list[dict[int, float]]:
    """The caps of each step: step k is k x share of each card's default limit (its cap now where it
    reports none) below its cap now, at least its minimum (whole watts, rounded down). Steps that
    change nothing more are left out."""
    if not 1 <= steps <= MAX_STEPS:
        raise ProfileError(f"--steps {steps}: must be 1 to {MAX_STEPS}")
    if not (math.isfinite(share) and 0 < share <= MAX_STEP_SHARE):
        raise ProfileError(f"--step-pct {100 * share:g}: must be above 0 and at most {100 * MAX_STEP_SHARE:g} %"
                           " of the default limit")
    plan: list[dict[int, float]] = []
    for k in range(1, steps + 1):
        caps = {g["index"]: max(g["power_limit_min_w"], math.floor(g["power_cap_w"] - k * share * _default_w(g)))
                for g in gpus}
        if plan and caps == plan[-1]:
            break
        if all(caps[g["index"]] >= g["power_cap_w"] for g in gpus):
            raise ProfileError("the tier's cards are at their minimum caps already: nothing to step down")
        plan.append(caps)
    return plan


def _default_w(gpu: dict[str, Any]) -> float:
    """The card's default power limit; its cap now where it does not report one (or reports nonsense)."""
    default_w = gpu.get("power_limit_default_w")
    ok = isinstance(default_w, int | float) and math.isfinite(default_w) and default_w > 0
    return float(default_w) if ok else float(gpu["power_cap_w"])


def measure(snapshot: Snapshot, gpus: list[dict[str, Any]], caps_w: dict[int, float]) -> dict[str, Any]:
    """The tier's ranks as the hub sees them now: samples/s and compute per step, at these caps."""
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    ranks = [{"rank": r["rank"], "job": r["job"], "gpu": by_uuid[r["gpu_uuid"]], "step": r["step"],
              "samples_per_s": r["samples_per_s"], "compute_s": r["compute_s"]}
             for r in snapshot["ranks"] if r["connected"] and r["gpu_uuid"] in by_uuid]
    rates = [r["samples_per_s"] for r in ranks if r["samples_per_s"] is not None]
    return {"caps_w": {str(i): w for i, w in caps_w.items()}, "ranks": ranks,
            "samples_per_s": sum(rates) if rates else None}


class Profiler:
    """One profile through a hub (`source`: a HubClient, or a Hub in this process)."""

    def __init__(self, source: Source, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, restore_wait_s: float = RESTORE_WAIT_S,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.source, self.sleep, self.clock, self.say = source, sleep, clock, say
        self.restore_wait_s = restore_wait_s

    def _snapshot(self) -> Snapshot:
        snapshot = self.source.snapshot()
        if snapshot is None:
            raise HubLost(f"the hub stopped answering ({getattr(self.source, 'last_error', None) or 'no snapshot'})")
        return snapshot

    def prepare(self, tier: str, steps: int, share: float, hold_s: float) -> ProfileRun:
        if not (math.isfinite(hold_s) and 1.0 <= hold_s <= MAX_HOLD_S):
            raise ProfileError(f"--hold {hold_s:g} s: must be 1 to {MAX_HOLD_S:g} s")
        name, gpus = tier_gpus(self._snapshot(), tier)
        return ProfileRun(name, [g["index"] for g in gpus], {g["index"]: g["power_cap_w"] for g in gpus},
                          profile_steps(gpus, steps, share), hold_s)

    def run(self, run: ProfileRun) -> ProfileRun:
        """Each step in turn, then the original caps back, whatever happens (exceptions go on up)."""
        snapshot = self._snapshot()
        gpus = [g for g in snapshot["gpus"] if g["index"] in run.gpus]
        baseline = measure(snapshot, gpus, run.original_caps_w)
        if not baseline["ranks"]:
            raise ProfileError(f"no training rank runs on the {run.tier} GPUs: the profile measures a running job")
        run.measured.append(baseline)
        try:
            for caps in run.steps:
                changed_before, run.restored = run.restored, False  # from the request on: a signal may come
                try:                                                # after the hub applied it, before its reply
                    self._set(caps)
                except HubLost:
                    raise
                except ProfileError:
                    run.restored = changed_before  # refused: the hub checks all before it changes any
                    raise
                self.say("caps " + ", ".join(f"GPU {i} {w:.0f} W" for i, w in caps.items()) + f" for {run.hold_s:g} s")
                run.measured.append(self._hold(run, gpus, caps))
        finally:
            if run.restored is False:
                run.restored = self.restore(run.original_caps_w)
        return run

    def _set(self, caps: dict[int, float]) -> None:
        reply = self.source.control({"type": "power", "action": "caps", "caps": {str(i): w for i, w in caps.items()}})
        if not reply.get("ok"):
            if reply.get("type") != "power_result":  # no answer from the hub: it may have applied them
                raise HubLost(f"the hub stopped answering ({str(reply.get('message'))[:200]})")
            raise ProfileError(f"the hub refused the caps: {str(reply.get('message'))[:200]}")

    def _hold(self, run: ProfileRun, gpus: list[dict[str, Any]], caps: dict[int, float]) -> dict[str, Any]:
        """Hold the caps `hold_s`, then until each rank has reported MIN_STEPS_AT_CAP steps at them (at
        most another hold); the hub must answer throughout."""
        start = measure(self._snapshot(), gpus, caps)
        first_step = {r["rank"]: r["step"] or 0 for r in start["ranks"]}
        begin = self.clock()
        while True:
            self.sleep(POLL_S)
            snapshot = self._snapshot()
            now = self.clock() - begin
            if now < run.hold_s:
                continue
            figures = measure(snapshot, gpus, caps)
            settled = all((r["step"] or 0) - first_step.get(r["rank"], 0) >= MIN_STEPS_AT_CAP for r in figures["ranks"])
            if settled or now >= 2 * run.hold_s:
                figures["settled"] = settled
                return figures

    def restore(self, original: dict[int, float]) -> bool:
        """The original caps back, retried while the hub does not answer (at most restore_wait_s)."""
        deadline = self.clock() + self.restore_wait_s
        told = False
        while True:
            try:
                self._set(original)
                return True
            except ProfileError as error:
                if self.clock() >= deadline:
                    return False
                if not told:
                    told = True
                    self.say(f"{error}: the hub stopped answering? the original caps go back when it answers"
                             f" (waiting at most {self.restore_wait_s:g} s)")
                self.sleep(POLL_S)


def not_restored_line(original: dict[int, float]) -> str:
    return "caps NOT restored: set them back with " + "; ".join(
        f"gpumix power set {i} {w:.0f}" for i, w in original.items())
