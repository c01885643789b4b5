"""Every figure docs/benchmarks.md claims is backed: it sits in the page's table of backed figures
with the raw JSON in benchmarks/results/ it comes from, and the value is what that file holds.
A section without raw data must say it is not reproduced."""

from __future__ import annotations

import glob
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results"


def figure_rows(text: str) -> list[dict[str, str]]:
    block = re.search(r"<!-- figures:.*?-->\n(.*?)<!-- /figures -->", text, re.S)
    assert block, "docs/benchmarks.md has no table of backed figures"
    rows = []
    command = ""
    for line in block.group(1).splitlines()[2:]:  # after the header and the rule
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 6, line
        figure, value, file, key, factor, row_command = cells
        command = command if row_command == "same" else row_command
        rows.append({"figure": figure, "value": value, "file": file.strip("`"), "key": key.strip("`"),
                     "factor": factor, "command": command})
    return rows


def lookup(document: Any, key: str) -> Any:
    for part in key.split("."):
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def backs(quoted: str, raw: Any, factor: float) -> bool:
    """The quoted figure is the raw value, in the quoted unit, rounded as quoted."""
    if not isinstance(raw, int | float) or isinstance(raw, bool) or not math.isfinite(raw):
        return False
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return round(raw * factor, decimals) == float(quoted)


ROWS = figure_rows(DOC.read_text())


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['file']}:{r['key']}" for r in ROWS])
def test_each_quoted_figure_is_in_its_results_file(row: dict[str, str]) -> None:
    path = RESULTS / row["file"]
    assert path.is_file(), f"{row['figure']}: no {path.relative_to(ROOT)}"
    raw = lookup(json.loads(path.read_text()), row["key"])
    assert backs(row["value"], raw, float(row["factor"])), (row["figure"], row["value"], raw)
    assert "benchmarks/" in row["command"] or "gpumix" in row["command"], f"{row['figure']}: no command"


def test_the_check_catches_a_figure_its_file_does_not_hold() -> None:
    assert backs("1.042", 1.0423855, 1) and backs("99.9", 0.99865, 100) and backs("55.2", 55231717767.7, 1e-9)
    assert not backs("1.05", 1.0423855, 1) and not backs("99.9", 0.9971, 100) and not backs("1", float("nan"), 1)


def test_every_results_file_named_exists_and_is_json() -> None:
    text = DOC.read_text()
    for name in set(re.findall(r"benchmarks/results/([\w{},.*-]+\.json)", text)):
        if "DATE" in name:  # a command's output name, not a file
            continue
        patterns = [name]
        if "{" in name:  # probe_h200_run{1,2,3}_...json
            head, options, tail = re.match(r"(.*)\{(.*)\}(.*)", name).groups()
            patterns = [head + option + tail for option in options.split(",")]
        for pattern in patterns:
            found = glob.glob(str(RESULTS / pattern))
            assert found, f"docs/benchmarks.md names benchmarks/results/{pattern}, which is not there"
    for path in RESULTS.glob("*.json"):
        json.loads(path.read_text())


def test_a_section_with_figures_is_backed_or_says_it_is_not() -> None:
    sections = re.split(r"\n(?=## )", DOC.read_text())[1:]
    for section in sections:
        title = section.splitlines()[0]
        if title in ("## Backed figures", "## Commands to rerun"):
            continue
        backed = "benchmarks/results/" in section
        assert backed or "**Not reproduced.**" in section, f"{title}: figures without raw results"
