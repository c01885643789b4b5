"""The user's controls: marks, power caps, the budget fit, the split and its restart, the probe.

A mixin of the App (GpumixApp inherits it): the keys, bindings and check_action stay where Textual
looks for them, and the workers (@work) run on the App as before. It asks the hub through the App's
source and answers in the App's toasts; it never polls or renders.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Footer

from gpumix.tui import format as fmt

if TYPE_CHECKING:
    from textual.app import App

    _Base = App[None]  # what the mixin reads of its App, for the type checker only
else:
    _Base = object


def _user_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _cap_changes(gpu: dict[str, Any]) -> bool:
    """A fitted cap at least half a watt from the current one (a cap that is no number changes nothing)."""
    new_w, old_w = fmt.number(gpu.get("new_w")), fmt.number(gpu.get("old_w"))
    return new_w is not None and (old_w is None or abs(new_w - old_w) >= 0.5)


def restart_question(plan: dict[str, Any], choice: str) -> str:
    """What confirming a split restarts (the job stops and resumes from its checkpoint)."""
    job = fmt.plain(plan.get("job"))
    if choice == "without":
        tier = fmt.plain((plan.get("without_tier") or {}).get("tier_left_out"))
        what = f"without the {tier} tier ({fmt.fixed((plan.get('without_tier') or {}).get('samples_per_s'))} samples/s predicted)"
    else:
        what = f"into the proposed split ({fmt.fixed((plan.get('proposed') or {}).get('samples_per_s'))} samples/s predicted)"
    return f"Restart job {job} {what}?\nThe job stops and resumes from its last checkpoint."


class UserControls(_Base):
    """The App's control actions and workflows (hidden with --readonly by the App's check_action)."""

    last_control_reply: dict[str, Any] | None = None  # the hub's last answer to a control

    # -- marks ----------------------------------------------------------------------

    def _gpu(self, uuid: str | None) -> dict[str, Any] | None:
        return next((g for g in (self.snapshot or {}).get("gpus", []) if g["uuid"] == uuid), None)

    def action_mark(self) -> None:
        table = self.table
        uuid = table.selected_uuid
        if uuid is not None:
            table.marked ^= {uuid}
            self._marks_changed()

    def action_mark_tier(self) -> None:
        """The selected GPU's whole tier joins the marks (marks already made stay)."""
        table = self.table
        selected = self._gpu(table.selected_uuid)
        if selected is not None:
            table.marked |= {g["uuid"] for g in self.snapshot["gpus"] if g["tier"] == selected["tier"]}
            self._marks_changed()

    def action_clear_marks(self) -> None:
        if self.table.marked:
            self.table.marked.clear()
            self._marks_changed()

    def _marks_changed(self) -> None:
        self.refresh_bindings()  # u shows in the footer only while marks exist
        # below 100 columns, u takes the palette hint's place (ctrl+p still works; the help says it)
        self.main_screen.query_one(Footer).show_command_palette = not (self.table.marked and self.terminal_size.width < 100)
        self._refresh_now()

    # -- the probe ------------------------------------------------------------------

    def action_probe(self) -> None:
        """Measure the links (gpumix probe) once the user confirms: it loads the GPUs for up to 30 s."""
        # the dialogs load when first opened: a dashboard that never opens them keeps their memory (RSS)
        from gpumix.tui.probe_screen import ProbeConfirm, ProbeScreen

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.push_screen(ProbeScreen())
        self.push_screen(ProbeConfirm(self.snapshot), confirmed)

    # -- power: a cap, the budget fit -----------------------------------------------

    def action_power(self) -> None:
        from gpumix.tui.power_screens import ConfirmScreen, PowerDialog

        table = self.table
        uuids = table.marked or ({table.selected_uuid} if table.selected_uuid else set())
        gpus = [g for g in (self.snapshot or {}).get("gpus", []) if g["uuid"] in uuids and not g["lost"]]
        if not gpus:
            return

        def dialog_closed(request: dict[str, Any] | None) -> None:
            if request is None:
                return
            targets = ", ".join(fmt.plain(g["index"]) for g in gpus)
            what = f"cap {request['watts']:.0f} W" if request["action"] == "set" else "the default cap"
            # the marks were for this change: once it is applied they are cleared, and the toast says so
            consumed = bool(table.marked)
            self.push_screen(ConfirmScreen(f"Set GPU(s) {targets} to {what}?"),
                             lambda yes: self.send_control(request, clears_marks=consumed) if yes else None)

        self.push_screen(PowerDialog(gpus), dialog_closed)

    def _dashboard_in_front(self) -> bool:
        """A proposal that comes back after the user moved on (another screen, a dialog already
        open, the same key pressed again) opens nothing: dialogs never pile up."""
        return self.screen is self.main_screen

    def action_fit_budget(self) -> None:
        self.propose_fit()

    @work(thread=True, exclusive=True, group="propose-fit")  # b pressed again: the newest ask wins
    def propose_fit(self) -> None:
        reply = self.source.control({"type": "power", "action": "fit", "dry_run": True})
        self.call_from_thread(self._show_fit, reply)

    def _show_fit(self, reply: dict[str, Any]) -> None:
        from gpumix.tui.power_screens import FitScreen

        if not reply["ok"]:
            self.say(reply["message"], severity="error")
            return
        caps = {str(g["index"]): g["new_w"] for g in reply["fit"]["gpus"] if _cap_changes(g)}
        if not caps:
            self.say("the caps already fit the budget", timeout=5)
            return
        if not self._dashboard_in_front():
            return
        self.push_screen(FitScreen(reply), lambda yes: self.send_control({"type": "power", "action": "caps", "caps": caps}) if yes else None)

    # -- the split and its restart --------------------------------------------------

    def action_replan(self) -> None:
        self.propose_plan()

    def _plan_json(self, snapshot: dict[str, Any], job: str | None = None,
                   exclude: frozenset[int] = frozenset()) -> dict[str, Any] | None:
        """The planner's JSON for the job, or None after saying why not (on a worker thread)."""
        from gpumix.advice.probe_results import job_allreduce_floor
        from gpumix.plan.inputs import PlanInputError, pick_job, plan_from_snapshot
        from gpumix.plan.planner import plan_to_json

        try:
            job, plan = plan_from_snapshot(snapshot, job, exclude=exclude,  # a kept probe's floor, as `gpumix plan`
                                           allreduce_floor=job_allreduce_floor(snapshot, pick_job(snapshot, job)))
        except (PlanInputError, ValueError) as error:
            self.call_from_thread(self.say, f"no plan: {error}", severity="warning")
            return None
        return {**plan_to_json(plan), "job": job, "plan_id": uuid.uuid4().hex[:8]}

    @work(thread=True, exclusive=True, group="propose-plan")
    def propose_plan(self) -> None:
        snapshot = self.snapshot
        data = self._plan_json(snapshot) if snapshot is not None else None
        if data is not None:
            self.call_from_thread(self._show_plan, data, snapshot)

    def _show_plan(self, plan: dict[str, Any], snapshot: dict[str, Any]) -> None:
        from gpumix.tui.plan_screen import PlanScreen
        from gpumix.tui.power_screens import ConfirmScreen

        if not self._dashboard_in_front():
            return
        def restart(choice: str | None) -> None:
            if choice == "split":
                self.send_control({"type": "replan", "job": plan["job"], "plan": plan})
            elif choice == "without":
                self.plan_without_tier(plan, snapshot)

        def chosen(choice: str | None) -> None:
            if choice is not None:  # a restart stops a training job: asked once more
                self.push_screen(ConfirmScreen(restart_question(plan, choice)), lambda yes: restart(choice) if yes else None)

        self.push_screen(PlanScreen(plan, snapshot), chosen)

    @work(thread=True, group="control")
    def plan_without_tier(self, plan: dict[str, Any], snapshot: dict[str, Any]) -> None:
        """The split over the ranks the best leave-one-tier-out option keeps; the others get none."""
        kept = set(plan["without_tier"]["ranks"])
        left_out = frozenset(r["rank"] for r in plan["ranks"] if r["rank"] not in kept)
        data = self._plan_json(snapshot, plan["job"], left_out)
        if data is not None:
            self.call_from_thread(self.send_control, {"type": "replan", "job": data["job"], "plan": data})

    # -- asking the hub -------------------------------------------------------------

    @work(thread=True, group="control")
    def send_control(self, request: dict[str, Any], clears_marks: bool = False) -> None:
        reply = self.source.control({**request, "user": _user_name()})
        self.call_from_thread(self._control_done, reply, clears_marks)

    def _control_done(self, reply: dict[str, Any], clears_marks: bool = False) -> None:
        """The hub's answer in one toast. Marks are cleared only by the cap change they were
        made for (a fit or a re-plan keeps them), and the toast says so."""
        self.last_control_reply = reply
        cleared = reply["ok"] and clears_marks and bool(self.table.marked)
        if cleared:
            self.table.marked.clear()
            self._marks_changed()
        message = fmt.plain(reply["message"], max_chars=1000) + (" · marks cleared" if cleared else "")
        self.say(message, severity="information" if reply["ok"] else "error")
