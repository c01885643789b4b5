"""Budgets that match the wiring: each supply's and circuit's load, and caps fitted under all of them.

The wiring itself (the `[power]` table: supplies, the GPUs each feeds, circuits) is read and checked
in `gpumix.power.layout`; its names stay importable from here.

A supply's load is what it feeds: its GPUs' draw less their slot share, the slot shares of the
GPUs whose slots it powers (the board supply, or a powered riser's `slot_gpus`), and `other_w`.
A circuit's load is its supplies' loads divided by their efficiency. Every budget is linear
in the GPUs' power, so caps that fit are found by cutting caps until each budget holds.

Pure functions; a budget that cannot be met is one line (BudgetError) and changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpumix.power.budget import (
    BudgetError,
    BudgetFit,
    CapProposal,
    GpuPower,
    fit_to_budget,
    time_ratio,
)
from gpumix.power.layout import (
    Circuit,
    LayoutError,
    PowerLayout,
    Supply,
    layout_from_json,
    load_layout,
    parse_layout,
    rig_layout,
)

__all__ = ["Budget", "Circuit", "LayoutError", "PowerLayout", "Supply", "budgets", "fit_for_snapshot",
           "fit_to_layout", "layout_from_json", "load_layout", "loads", "parse_layout", "rig_layout"]
FIT_ROUNDS = 400


@dataclass(frozen=True)
class Budget:
    """One limit as a linear function of the GPUs' power: fixed_w + Σ coefficient·P_gpu ≤ limit_w."""

    kind: str  # "supply" or "circuit"
    name: str
    limit_w: float  # the rating (supply) or continuous limit (circuit)
    fixed_w: float
    coefficients: dict[int, float]

    def load_w(self, power_by_gpu: dict[int, float]) -> float:
        return self.fixed_w + sum(c * power_by_gpu.get(g, 0.0) for g, c in self.coefficients.items())


# -- budgets and loads ----------------------------------------------------------------------


def budgets(layout: PowerLayout) -> list[Budget]:
    """Each supply's and each circuit's load as a linear function of GPU power."""
    board = next((s for s in layout.supplies if s.board), None)
    riser = {g: s.name for s in layout.supplies for g in s.slot_gpus}
    cable = {g: s.name for s in layout.supplies for g in s.gpus}
    result = []
    by_supply: dict[str, Budget] = {}
    for supply in layout.supplies:
        coefficients: dict[int, float] = {}
        for gpu in supply.gpus:
            coefficients[gpu] = coefficients.get(gpu, 0.0) + (1.0 - layout.slot_share)
        slots = [g for g in cable if riser.get(g) == supply.name or (g not in riser and board is supply)]
        for gpu in slots:
            coefficients[gpu] = coefficients.get(gpu, 0.0) + layout.slot_share
        budget = Budget("supply", supply.name, supply.rating_w, supply.other_w, coefficients)
        by_supply[supply.name] = budget
        result.append(budget)
    for circuit in layout.circuits:
        fixed, coefficients = 0.0, {}
        for supply in layout.supplies:
            if supply.circuit != circuit.name:
                continue
            budget = by_supply[supply.name]
            fixed += budget.fixed_w / supply.efficiency
            for gpu, c in budget.coefficients.items():
                coefficients[gpu] = coefficients.get(gpu, 0.0) + c / supply.efficiency
        result.append(Budget("circuit", circuit.name, circuit.limit_w, fixed, coefficients))
    return result


def loads(layout: PowerLayout, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per supply and circuit: load now (from draw), load at the caps, and its limits.
    `gpus` are snapshot rows (index, power_w, power_cap_w); a lost GPU counts at its cap."""
    draw = {g["index"]: _finite(g.get("power_w")) or _finite(g.get("power_cap_w")) or 0.0 for g in gpus}
    caps = {g["index"]: _finite(g.get("power_cap_w")) or 0.0 for g in gpus}
    rows = []
    for budget in budgets(layout):
        rows.append({"kind": budget.kind, "name": budget.name, "limit_w": budget.limit_w,
                     "usable_w": budget.limit_w * (1.0 - layout.headroom),
                     "draw_w": budget.load_w(draw), "caps_w": budget.load_w(caps),
                     "gpus": sorted(g for g, c in budget.coefficients.items() if c > 0)})
    return rows


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value >= 0 else None


# -- the fit under every budget at once ---------------------------------------------------


def fit_to_layout(gpus: list[GpuPower], layout: PowerLayout, total_budget_w: float | None = None) -> BudgetFit:
    """Caps under every supply's and circuit's usable limit (headroom taken off) and, if given,
    the machine's total GPU budget: the most overloaded budget is cut first through the single-budget
    fit over the GPUs it feeds (least throughput cost first), until all hold."""
    by_index = {g.index: g for g in gpus}
    caps = {g.index: min(g.cap_w, g.max_w) for g in gpus}
    limits = [(b, b.limit_w * (1.0 - layout.headroom)) for b in budgets(layout)]
    for budget, usable in limits:
        floor = budget.load_w({g.index: g.min_w for g in gpus})
        if floor > usable + 1e-6:
            raise BudgetError(f"{budget.kind} {budget.name}: even at the cards' minimum caps it would carry"
                              f" {floor:.0f} W, above its usable {usable:.0f} W ({100 * layout.headroom:.0f} % headroom)")
    for _ in range(FIT_ROUNDS):
        worst = max(((b.load_w(caps) - usable, b) for b, usable in limits), key=lambda pair: pair[0], default=None)
        if worst is None or worst[0] <= 1e-6:
            break
        excess, budget = worst
        members = [g for g in budget.coefficients if g in by_index and caps[g] > by_index[g].min_w + 1e-9]
        if not members:
            raise BudgetError(f"{budget.kind} {budget.name}: cannot be met by capping its GPUs")
        # Cutting cap-watts of GPU g lowers this load by coefficient·watts: undercut by the largest
        # coefficient (never cuts more than needed), and finish a sub-watt rest with the smallest.
        coefficients = [budget.coefficients[g] for g in members]
        scale = max(coefficients) if excess > 0.5 else min(coefficients)
        current = [replace(by_index[g], cap_w=caps[g]) for g in members]
        target = max(sum(caps[g] for g in members) - max(excess / scale, 0.1), sum(by_index[g].min_w for g in members))
        fit = fit_to_budget(current, target, raise_above_stock=False)
        for proposal in fit.proposals:
            caps[proposal.index] = proposal.new_w
    else:
        raise BudgetError("the supplies' and circuits' budgets could not all be met")
    if total_budget_w is not None and sum(caps.values()) > total_budget_w:
        fit = fit_to_budget([replace(g, cap_w=caps[g.index]) for g in gpus], total_budget_w, raise_above_stock=False)
        caps.update({p.index: p.new_w for p in fit.proposals})
    kept = _kept(gpus, caps)
    proposals = [CapProposal(g.index, g.uuid, g.tier, g.cap_w, caps[g.index], _reason(g, caps[g.index], layout),
                             g.power_curve().basis()) for g in gpus]
    budget_w = total_budget_w if total_budget_w is not None else sum(caps.values())
    return BudgetFit(budget_w, sum(g.cap_w for g in gpus), sum(caps.values()),
                     _step(gpus, {g.index: g.cap_w for g in gpus}), _step(gpus, caps), kept, proposals)


def fit_for_snapshot(gpus: list[GpuPower], snapshot: dict[str, Any], budget_w: float | None,
                     headroom: Any = None) -> BudgetFit:
    """The fit the hub's power control runs: under every supply and circuit the snapshot's layout
    declares (headroom as asked, else the layout's) and the total budget; without a layout, the total."""
    layout = layout_from_json(snapshot.get("power_layout"), len(snapshot.get("gpus") or []))
    if layout is None:
        if budget_w is None:
            raise BudgetError("fit needs a power budget in watts (or supplies and circuits: --power-config)")
        return fit_to_budget(gpus, float(budget_w))
    if headroom is not None:
        if isinstance(headroom, bool) or not isinstance(headroom, int | float):
            raise BudgetError("headroom must be a share from 0 to 0.9")
        try:
            layout = layout.with_headroom(float(headroom))
        except LayoutError as error:
            raise BudgetError(str(error)) from None
    return fit_to_layout(gpus, layout, None if budget_w is None else float(budget_w))


def _step(gpus: list[GpuPower], caps: dict[int, float]) -> float | None:
    in_job = [g for g in gpus if g.compute_s is not None]
    if not in_job:
        return None
    return max(g.compute_s * time_ratio(g, g.cap_w, caps[g.index]) for g in in_job) \
        + max(g.comm_s for g in in_job)


def _kept(gpus: list[GpuPower], caps: dict[int, float]) -> float:
    before, after = _step(gpus, {g.index: g.cap_w for g in gpus}), _step(gpus, caps)
    if before and after:
        return before / after
    total = sum(g.default_w for g in gpus) or 1.0
    return sum(g.default_w / time_ratio(g, g.cap_w, caps[g.index]) for g in gpus) / total


def _reason(gpu: GpuPower, new_w: float, layout: PowerLayout) -> str:
    if abs(new_w - gpu.cap_w) < 1e-9:
        return "unchanged: its supplies and circuits have room"
    feeding = [s.name for s in layout.supplies if gpu.index in s.gpus or gpu.index in s.slot_gpus]
    return f"cut so that {', '.join(feeding) or 'the board supply'} and its circuit stay below their limits"
