"""`gpumix power profile`'s bounds and defaults (gpumix.power.profile says why each): what the CLI's
flags check and print, apart from the profiler itself, so that building `gpumix`'s parser for `power
show` or `doctor` loads no profiler (issue 13: its dataclass and the snapshot's TypedDicts)."""

from __future__ import annotations

MAX_STEPS = 5
MAX_STEP_SHARE = 0.25  # of the card's default power limit, per step
DEFAULT_STEPS = 4  # 4 x 10 %: down to 60 % of the default limit, where the fit's cuts land (docs/power.md)
DEFAULT_STEP_SHARE = 0.10
DEFAULT_HOLD_S = 30.0
MAX_HOLD_S = 600.0
RESTORE_WAIT_S = 30.0  # how long a lost hub is waited for to put the caps back
