"""Controls the hub carries out for its clients: power caps (set, reset, fit to budget).

Every request is checked whole before anything changes: a cap outside any
target's range refuses the request and changes nothing. The audit names who the
server knows is asking, never who the request claims to be.
"""

from __future__ import annotations

from typing import Any

from gpumix.power.budget import BudgetError
from gpumix.power.caps import AuditUser, PowerChange, PowerController, PowerError, check_cap
from gpumix.power.snapshot_inputs import gpu_power_from_snapshot, unread_cap
from gpumix.power.supplies import fit_for_snapshot

POWER_ACTIONS = {"set", "reset", "fit", "caps"}


def power_control(controller: PowerController, snapshot: dict[str, Any] | None, request: dict[str, Any],
                  budget_w: float | None, peer: str | None = None) -> dict[str, Any]:
    """Carry out one power request; the reply says what changed, or why nothing did.

    The audit names `peer` (a Unix peer's uid, a TCP token holder's address), or this
    process's user when None; a user the request claims is kept beside it as `claimed_user`."""
    action = request.get("action")
    dry_run = bool(request.get("dry_run"))
    claimed = request.get("user")
    user = AuditUser(peer or controller.user, claimed if isinstance(claimed, str) and claimed else None)
    try:
        if action not in POWER_ACTIONS:
            raise PowerError(f"unknown power action {action!r}")
        if action == "fit":
            return _fit(controller, snapshot, request, budget_w, dry_run, user)
        if action == "caps":  # exact caps per GPU (a confirmed fit proposal)
            caps = request.get("caps")
            if not isinstance(caps, dict) or not caps:
                raise PowerError("caps must map GPU indices to watts")
            targets = []
            for key, watts in caps.items():
                if not str(key).isdigit() or not isinstance(watts, int | float) or isinstance(watts, bool):
                    raise PowerError("caps must map GPU indices to watts")
                info = controller.info(int(key))
                check_cap(info, float(watts))
                targets.append((info.index, float(watts)))
            changes = [controller.set_cap(index, watts, dry_run=dry_run, user=user) for index, watts in targets]
            return _with_changes({"type": "power_result", "ok": True, "message": _changes_message(changes, dry_run)},
                                 changes)
        gpus = request.get("gpus")
        if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            raise PowerError("name the GPUs by index")
        infos = [controller.info(index) for index in gpus]
        if action == "set":
            watts = request.get("watts")
            if not isinstance(watts, int | float) or isinstance(watts, bool):
                raise PowerError("a cap in watts is needed")
            for info in infos:  # all or nothing: check every target first
                check_cap(info, float(watts))
            changes = [controller.set_cap(info.index, float(watts), dry_run=dry_run, user=user) for info in infos]
        else:
            changes = [controller.reset_cap(info.index, dry_run=dry_run, user=user) for info in infos]
        return _with_changes({"type": "power_result", "ok": True, "message": _changes_message(changes, dry_run)},
                             changes)
    except (PowerError, BudgetError) as error:
        return {"type": "power_result", "ok": False, "message": str(error), "changes": []}


def _fit(controller: PowerController, snapshot: dict[str, Any] | None, request: dict[str, Any],
         budget_w: float | None, dry_run: bool, user: AuditUser) -> dict[str, Any]:
    """Fit the caps to every budget the machine declares and apply them (unless a dry run)."""
    if snapshot is None:
        raise PowerError("no reading yet: try again in a second")
    budget = request.get("budget_w") or budget_w
    if budget is not None and (not isinstance(budget, int | float) or isinstance(budget, bool)):
        raise PowerError("fit needs a power budget in watts")
    unread = unread_cap(snapshot)
    if unread is not None:
        raise PowerError(unread)
    # every budget the machine declares: supplies, circuits (headroom for transients) and the total
    fit = fit_for_snapshot(gpu_power_from_snapshot(snapshot), snapshot, budget, request.get("headroom"))
    changes = []
    if not dry_run:
        for proposal in fit.proposals:
            if abs(proposal.new_w - proposal.old_w) >= 0.5:
                changes.append(controller.set_cap(proposal.index, proposal.new_w, user=user))
    reply = {"type": "power_result", "ok": True, "message": _fit_message(fit.to_json(), dry_run), "fit": fit.to_json()}
    return _with_changes(reply, changes)


def _with_changes(reply: dict[str, Any], changes: list[PowerChange]) -> dict[str, Any]:
    """The changes into the reply; an audit line that could not be written is said, not swallowed."""
    reply["changes"] = [change.to_json() for change in changes]
    failed = next((change.audit_error for change in changes if change.audit_error), None)
    if failed is not None:  # the caps are applied: the reply must not hide that nobody can trace them
        reply["audit_error"] = failed
        reply["message"] += f" — but the audit log could not be written: {failed}"
    return reply


def _changes_message(changes: list[PowerChange], dry_run: bool) -> str:
    verb = "would set" if dry_run else "set"
    return f"{verb}: " + ", ".join(f"GPU {c.gpu_index} {c.old_w or 0:.0f}→{c.new_w:.0f} W" for c in changes)


def _fit_message(fit: dict[str, Any], dry_run: bool) -> str:
    kept = 100 * fit["throughput_kept"]
    head = f"caps {fit['caps_before_w']:.0f} → {fit['caps_after_w']:.0f} W (budget {fit['budget_w']:.0f} W),"
    return f"{head} predicted throughput kept {kept:.1f} %" + (" — proposal only" if dry_run else " — applied")
