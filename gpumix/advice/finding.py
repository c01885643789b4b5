"""A finding: what the advisor saw (evidence, in figures), how bad it is, and what to do.

A plain class, not a dataclass: `gpumix doctor` attached to a hub builds findings from the hub's snapshot,
and the dataclasses module (with inspect) was 13 ms of its imports on the 2-core box (issue 13)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
FIELDS = ("id", "severity", "title", "evidence", "fix", "gpus")


class Finding:
    __slots__ = FIELDS

    def __init__(self, id: str, severity: str, title: str, evidence: str, fix: str,  # noqa: A002 (the JSON's name)
                 gpus: Iterable[int] = ()) -> None:
        self.id = id
        self.severity = severity  # info, warning, error
        self.title = title
        self.evidence = evidence
        self.fix = fix
        self.gpus: list[int] = list(gpus)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finding):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in FIELDS)

    __hash__ = None  # type: ignore[assignment]  (mutable, as the dataclass was)

    def __repr__(self) -> str:
        return "Finding(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELDS) + ")"

    def to_json(self) -> dict[str, Any]:
        """Field for field what dataclasses.asdict gave, without its deep copy of each value (the hub turns
        every finding to JSON each tick, issue 13): the strings are immutable, the GPU indexes ints, so a
        copy of the list is the whole deep copy."""
        return {"id": self.id, "severity": self.severity, "title": self.title, "evidence": self.evidence,
                "fix": self.fix, "gpus": list(self.gpus)}
