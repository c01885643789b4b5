"""A finding: what the advisor saw (evidence, in figures), how bad it is, and what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass
class Finding:
    id: str
    severity: str  # info, warning, error
    title: str
    evidence: str
    fix: str
    gpus: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """What dataclasses.asdict gives, field for field, without its deep copy of each value (the
        hub turns every finding to JSON each tick, issue 13): the strings are immutable, the GPU
        indexes ints, so a copy of the list is the whole deep copy."""
        return {"id": self.id, "severity": self.severity, "title": self.title, "evidence": self.evidence,
                "fix": self.fix, "gpus": list(self.gpus)}
