"""A finding: what the advisor saw (evidence, in figures), how bad it is, and what to do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
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
        return asdict(self)
