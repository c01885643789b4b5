"""Dependencies point one way (tui -> core <- agent), and the agent stays light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def imported_modules(folder: Path) -> dict[Path, set[str]]:
    found = {}
    for path in folder.rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[path] = names
    return found


def test_core_and_agent_never_import_the_tui() -> None:
    for folder in (ROOT / "gpumix", ROOT / "agent"):
        for path, names in imported_modules(folder).items():
            bad = {name for name in names if name == "gpumix.tui" or name.startswith("gpumix.tui.")}
            assert not bad, f"{path} imports {bad}: dependencies point tui -> core <- agent"


def test_agent_import_is_light() -> None:
    code = "import sys, gpumix.agent; print(sorted({'textual', 'plotext', 'pynvml', 'rich'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_top_level_tui_or_agent_package() -> None:
    code = "import importlib.util as u; print(u.find_spec('tui'), u.find_spec('agent'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert result.stdout.strip() == "None None"
