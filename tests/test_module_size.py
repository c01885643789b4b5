"""One idea per module (issue 11): no module over ~350 lines and no function over ~60, in every part
of the package: gpumix/'s and the top-level agent/ and tui/ (installed as gpumix.agent, gpumix.tui)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("advice", "cli", "demo", "hub", "hw", "model", "plan", "power", "probe", "record", "run", "sim", "wire")
TOP_LEVEL_PARTS = ("agent", "tui")
MAX_MODULE_LINES = 350
MAX_FUNCTION_LINES = 60


def modules() -> list[Path]:
    folders = [ROOT / "gpumix" / part for part in PARTS] + [ROOT / part for part in TOP_LEVEL_PARTS]
    found = sorted(path for folder in folders for path in folder.rglob("*.py"))
    assert len(found) > 150, len(found)  # the parts are where this test thinks they are
    return found


def test_no_module_is_over_its_line_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_its_line_limit() -> None:
    long = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_every_module_says_what_it_owns() -> None:
    """A module's docstring opens with one line on what it holds."""
    bare = [str(p.relative_to(ROOT)) for p in modules()
            if p.name != "__init__.py" and not (ast.get_docstring(ast.parse(p.read_text())) or "").strip()]
    assert bare == []
