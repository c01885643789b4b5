"""`gpumix doctor`: the advisor's findings about this box; exit 0 healthy, 1 warnings, 2 errors.

The hub already runs the advisor on every snapshot it merges (`snapshot["findings"]`), with the same
settings doctor would use unless told otherwise: doctor prints those and loads no advisor of its own
(issue 13: importing it was a third of an attached doctor's time). It runs the advisor itself when a
setting is its own (--power-budget, --min-4090-p2p-driver, $GPUMIX_4090_P2P_MIN_DRIVER, which the hub's
environment may not share) or when the snapshot's findings are missing or malformed."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from gpumix.advice.finding import SEVERITY_RANK, Finding
from gpumix.cli.common import (
    MAX_POWER_W,
    add_output_flags,
    add_rig_flags,
    at_most,
    fail,
    positive_float,
)
from gpumix.hub.client import printable

if TYPE_CHECKING:  # hints only: the TypedDicts cost an attached doctor 9 ms to import (issue 13)
    from gpumix.wire.snapshot_types import Snapshot, Source

PROG = "gpumix"
MIN_DRIVER_ENV = "GPUMIX_4090_P2P_MIN_DRIVER"
FINDING_TEXT_FIELDS = ("id", "severity", "title", "evidence", "fix")
MAX_FINDING_CHARS = 2000  # per field of a hub's finding


def add_doctor_parser(commands: Any) -> None:
    doctor = commands.add_parser("doctor", help="findings about this box: exit 0 healthy, 1 warnings, 2 errors")
    add_rig_flags(doctor, hub=True)
    add_output_flags(doctor)
    doctor.add_argument("--power-budget", type=at_most(positive_float, MAX_POWER_W), metavar="WATTS",
                        help="the machine's GPU power budget")
    doctor.add_argument("--min-4090-p2p-driver", metavar="VERSION",
                        help="drivers before this one are suspect for RTX 4090 P2P (default 525.60.11;"
                             " also GPUMIX_4090_P2P_MIN_DRIVER)")


def run_doctor(args: argparse.Namespace, source: Source) -> int:
    snapshot = source.snapshot()
    if snapshot is None:
        fail(PROG, getattr(source, "last_error", None) or "the hub gave no snapshot")
    found = None if own_settings(args) else hub_findings(snapshot)
    if found is None:
        found = advisor_findings(args, snapshot)
    code = max((SEVERITY_RANK[f.severity] for f in found), default=0)
    if args.json:
        print(json.dumps({"exit_code": code, "findings": [f.to_json() for f in found]}, indent=1))
    else:
        if not found:
            print("healthy: no findings")
        for finding in found:
            print(f"[{finding.severity}] {finding.title}\n    evidence: {finding.evidence}\n    fix: {finding.fix}")
    return code


def own_settings(args: argparse.Namespace) -> bool:
    """A setting the hub's advisor may not share: doctor must run the advisor itself."""
    return bool(args.power_budget or args.min_4090_p2p_driver or os.environ.get(MIN_DRIVER_ENV))


def hub_findings(snapshot: Snapshot) -> list[Finding] | None:
    """The snapshot's findings as the advisor's records, or None when any is not one (an older or a
    foreign hub: the advisor runs here instead of printing what it cannot vouch for)."""
    listed = snapshot.get("findings")
    if not isinstance(listed, list):
        return None
    found = []
    for item in listed:
        if not isinstance(item, dict) or set(item) != {*FINDING_TEXT_FIELDS, "gpus"}:
            return None
        if not all(isinstance(item[name], str) for name in FINDING_TEXT_FIELDS) or item["severity"] not in SEVERITY_RANK:
            return None
        gpus = item["gpus"]
        if not isinstance(gpus, list) or not all(type(index) is int for index in gpus):
            return None
        # the hub's text is outside text (a foreign hub, a forged one): control characters shown, never sent
        found.append(Finding(**{**item, **{name: printable(item[name], MAX_FINDING_CHARS) for name in FINDING_TEXT_FIELDS}}))
    return found


def advisor_findings(args: argparse.Namespace, snapshot: Snapshot) -> list[Finding]:
    from gpumix.advice.advisor import AdvisorSettings, findings

    host = snapshot.get("host") or {}
    settings = AdvisorSettings(power_budget_w=args.power_budget or snapshot.get("power_budget_w"),
                               has_infiniband=bool(host.get("infiniband")),
                               **({"p2p_4090_min_driver": args.min_4090_p2p_driver} if args.min_4090_p2p_driver else {}))
    return findings(snapshot, settings)
