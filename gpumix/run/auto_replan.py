"""`gpumix run --auto-replan`: the supervisor asks for a re-plan by itself when one pays.

On the 2×H200 runs the best split took two re-plans, the second learning from what the first
measured (docs/planner.md), and a straggler can appear mid-run (a throttled card, another
process on a GPU). So when asked, the supervisor plans from the hub's snapshot every CHECK_S
once the ranks are past their warm-up, and restarts the job into a plan predicted to be at
least `min_speedup` times faster, at most `max_restarts` times. It never leaves ranks out:
that stays the user's call. A plan that interpolates between splits the ranks have measured
(gpumix/plan/interpolation.py: its predictions erred a quarter as much in the oracle's sets) needs
INTERPOLATED_SHARE of the gain asked: 1.03x where 1.05x is asked.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gpumix.plan.inputs import PlanInputError, plan_from_snapshot
from gpumix.plan.planner import plan_to_json
from gpumix.plan.split_types import Plan

CHECK_S = 5.0
# Inputs not measured yet (a rank without samples per second) cost no planning: look again soon,
# or a short run ends before the second look (seen on a loaded CI box: 60 steps in 6 s).
NOT_READY_RETRY_S = 0.5
OUTCOMES_KEPT = 8  # the latest different outcomes of the looks, for a message when no plan came
# The share of min_speedup's gain an interpolating plan needs. Over the oracle's 23 sets (docs/planner.md,
# session 19) such plans' predictions erred a median 0.7 % (90th percentile 2.6 %) against 2.8 % (9.8 %);
# six rigs the 1.05x bar held at 1.033-1.047x predicted ran 1.3-4.6 % faster with it
INTERPOLATED_SHARE = 0.6


@dataclass
class AutoReplan:
    min_speedup: float = 1.05
    max_restarts: int = 3
    # Steps after a (re)start before its figures count. DDP times iterations 1-10 (warm-up) and
    # then every 100th: before step 100 a rank's compute and comm are the warm-up's.
    settle_steps: int = 120
    proposed: int = 0  # plans proposed so far (a refused or aborted restart counts too: no retry loop)
    outcomes: deque[str] = field(default_factory=lambda: deque(maxlen=OUTCOMES_KEPT))  # the latest, changes only
    _next_check_s: float = -math.inf

    @property
    def last_outcome(self) -> str:
        """What the last look found (why it proposed nothing, or the plan it proposed)."""
        return self.outcomes[-1] if self.outcomes else "not checked yet"

    def _note(self, outcome: str) -> None:
        if not self.outcomes or self.outcomes[-1] != outcome:
            self.outcomes.append(outcome)

    def bar(self, plan: Plan) -> float:
        """The predicted speedup this plan needs: min_speedup, or its INTERPOLATED_SHARE of the gain for a
        plan that interpolates between measured splits."""
        return 1 + (self.min_speedup - 1) * INTERPOLATED_SHARE if plan.interpolated else self.min_speedup

    def due(self, now_s: float) -> bool:
        """Worth a snapshot: restarts left, and the next look is due."""
        return self.proposed < self.max_restarts and now_s >= self._next_check_s

    def propose(self, snapshot: dict[str, Any], job: str, resume_step: int, granularity: int,
                now_s: float) -> dict[str, Any] | None:
        """A plan to restart into, or None: not due yet, still warming up, or nothing pays enough."""
        if not self.due(now_s):
            return None
        ranks = [r for r in snapshot.get("ranks", []) if r.get("job") == job and r.get("connected")]
        if not ranks:
            self._note("no ranks of the job report")
            return None
        if min(r.get("step") or 0 for r in ranks) < resume_step + self.settle_steps:
            self._note("ranks still settling")
            return None
        try:
            _, plan = plan_from_snapshot(snapshot, job, granularity=granularity)
        except PlanInputError as error:  # not measured enough yet: cheap to find out, so look again soon
            self._next_check_s = now_s + NOT_READY_RETRY_S
            self._note(f"not measured yet: {error}")
            return None
        except ValueError as error:  # no split fits
            self._next_check_s = now_s + CHECK_S
            self._note(f"no plan: {error}")
            return None
        self._next_check_s = now_s + CHECK_S  # planning costs a little: once per CHECK_S once warmed up
        bar = self.bar(plan)
        if plan.kept_current or not plan.speedup >= bar:
            asked = "interpolated, " if plan.interpolated else ""
            self._note(f"kept: {plan.speedup:.2f}x predicted, {asked}{bar:.2f}x asked"
                       f" (slowest rank at step {min(r.get('step') or 0 for r in ranks)})")
            return None
        self._note(f"proposed auto-{self.proposed + 1}")
        self.proposed += 1
        return {**plan_to_json(plan), "plan_id": f"auto-{self.proposed}"}
