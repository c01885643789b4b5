"""Checking a rig file's TOML: parsing it, each table's fields against a spec, and the line an error names."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class RigError(ValueError):
    """A bad rig file: str(error) is the one line the user sees."""


NUMBER = (int, float)
Spec = dict[str, tuple[type | tuple[type, ...], bool, tuple[float, float] | None]]
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # text shown in the TUI: no escape sequences


class Locator:
    """Finds the line of a field in the TOML text, for error messages."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def _header_line(self, pattern: str, occurrence: int = 0) -> int | None:
        seen = 0
        for number, line in enumerate(self.lines, start=1):
            if re.match(pattern, line.strip()):
                if seen == occurrence:
                    return number
                seen += 1
        return None

    def _field_line(self, start: int, field: str) -> int | None:
        for number in range(start + 1, len(self.lines) + 1):
            line = self.lines[number - 1].strip()
            if line.startswith("["):
                return None
            if re.match(rf"{re.escape(field)}\s*=", line):
                return number
        return None

    def line(self, table: str | None, field: str | None, occurrence: int = 0) -> int:
        """Line of `field` in `table` ([[gpus]] #occurrence, [models.KEY], or top level)."""
        if table is None:
            start = 0
        elif table == "gpus":
            start = self._header_line(r"\[\[\s*gpus\s*\]\]", occurrence) or 0
        else:
            key = re.escape(table.split(".", 1)[1])
            start = self._header_line(rf"\[\s*models\.\"?{key}\"?\s*\]") or 0
        found = self._field_line(start, field) if field else None
        if found is None and table is None and field:  # a top-level array of tables: [[gpus]]
            found = self._header_line(rf"\[\[?\s*{re.escape(field)}[\s.\]]")
        return found or start or 1


def check_fields(table: dict[str, Any], spec: Spec, where: str, fail: Any) -> None:
    """Each field of `spec`: present if required, of its type, finite and in its range (a
    string or list: its length), a string without control characters; no other fields."""
    for field in table:
        if field not in spec:
            fail(field, f"{where}.{field}: unknown field")
    for field, (kind, required, bounds) in spec.items():
        if field not in table:
            if required:
                fail(None, f"{where}: missing field '{field}'")
            continue
        value = table[field]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python, but `slot_width = true` is a mistake.
        if not isinstance(value, kinds) or isinstance(value, bool) != (bool in kinds):
            fail(field, f"{where}.{field}: expected {kind_name(kind)}, got {shown(value)}")
        if bounds is None:
            continue
        low, high = bounds
        if isinstance(value, int | float) and not (math.isfinite(value) and low <= value <= high):
            fail(field, f"{where}.{field}: must be {low:g} to {high:.10g}, got {shown(value)}")
        if isinstance(value, str | list | dict) and not low <= len(value) <= high:
            fail(field, f"{where}.{field}: must hold {low:g} to {high:g} {'characters' if isinstance(value, str) else 'entries'},"
                 f" got {len(value)}")
        if isinstance(value, str) and CONTROL.search(value):
            fail(field, f"{where}.{field}: must not hold control characters, got {shown(value)}")


def shown(value: Any) -> str:
    """A value for an error line: its repr (escapes made visible), at most 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false", list: "a list", dict: "a table"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def load_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise RigError(f"{source}:1: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = match.group(1) if match else "1"
        reason = re.sub(r"\s*\(at line.*\)", "", message)
        raise RigError(f"{source}:{line}: invalid TOML: {reason}") from None

