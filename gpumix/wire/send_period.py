"""How often an agent sends its steps to the hub, shared by the agent (which sends) and the supervisor
(whose restarts pick a stop step from the steps reported, so must allow for the lag).

1 s by default, the hub's tick and the dashboard's refresh: each agent write wakes the hub (issue 13:
about 250 us of its CPU a write, most of its cost per rank), and a snapshot is read once a second.
GPUMIX_AGENT_SEND_PERIOD_S overrides it for every rank of a run (the supervisor's children inherit it).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping

PERIOD_S = 1.0
PERIOD_ENV = "GPUMIX_AGENT_SEND_PERIOD_S"
MIN_PERIOD_S = 0.01
MAX_PERIOD_S = 10.0

log = logging.getLogger("gpumix.agent")


def send_period_s(environ: Mapping[str, str] = os.environ) -> float:
    """GPUMIX_AGENT_SEND_PERIOD_S when it is seconds in [MIN_PERIOD_S, MAX_PERIOD_S] (anything else: one
    warning, and the default), else PERIOD_S."""
    raw = environ.get(PERIOD_ENV, "").strip()
    if not raw:
        return PERIOD_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not MIN_PERIOD_S <= value <= MAX_PERIOD_S:  # NaN fails too
        log.warning("gpumix agent: %s must be seconds from %g to %g, got %r: sending every %g s",
                    PERIOD_ENV, MIN_PERIOD_S, MAX_PERIOD_S, raw[:40], PERIOD_S)
        return PERIOD_S
    return value
