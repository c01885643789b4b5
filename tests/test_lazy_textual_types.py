"""textual.types on first use (gpumix/cli/lazy_textual_types.py; issue 13: the dashboard's RSS).

The dashboard loads without the widgets only textual.types pulls in; every name textual.types exports is the
real module's object; the palette (ctrl+p) still opens and changes the theme. Each in a fresh interpreter:
what is loaded depends on what loaded before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.palette_flow import after_theme_change

REPO = Path(__file__).resolve().parent.parent
# Loaded only through textual.types (the palette's import of it): none is used by the dashboard.
WIDGETS_ONLY_TYPES_LOADS = ("textual.widgets._directory_tree", "textual.widgets._tree", "textual.widgets._select",
                            "textual.widgets._placeholder")


def run(code: str) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_dashboard_loads_without_the_widgets_only_textual_types_needs() -> None:
    loaded = run("""
        import json, sys
        import gpumix.tui.app, gpumix.tui.main
        from gpumix.cli.lazy_textual_types import LazyTextualTypes
        print(json.dumps({"lazy": isinstance(sys.modules["textual.types"], LazyTextualTypes),
                          "command": "textual.command" in sys.modules,
                          "loaded": [name for name in WIDGETS if name in sys.modules]}))
    """.replace("WIDGETS", repr(WIDGETS_ONLY_TYPES_LOADS)))
    assert loaded == {"lazy": True, "command": True, "loaded": []}


def test_every_name_is_the_real_modules_object() -> None:
    same = run("""
        import importlib.util, json, sys
        import gpumix.cli.lazy_textual_types  # installs
        import textual.types as lazy
        from textual.types import IgnoreReturnCallbackType  # the palette's import: no real load
        import textual._types
        first = IgnoreReturnCallbackType is textual._types.IgnoreReturnCallbackType
        still_lazy = "textual.widgets._select" not in sys.modules
        spec = importlib.util.find_spec("textual.types")
        real = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(real)
        names = list(real.__all__)
        print(json.dumps({"first": first, "still_lazy": still_lazy, "count": len(names),
                          "differ": [n for n in names if getattr(lazy, n) is not getattr(real, n)],
                          "all": list(lazy.__all__) == names, "dir": set(names) <= set(dir(lazy))}))
    """)
    assert same["first"] and same["still_lazy"]
    assert same["count"] > 15 and same["differ"] == [] and same["all"] and same["dir"]


def test_the_palette_still_changes_the_theme() -> None:
    theme = run(after_theme_change('app.theme, type(sys.modules["textual.types"]).__name__'))
    assert theme == ["nord", "LazyTextualTypes"]


def test_nothing_is_installed_once_textual_types_has_loaded() -> None:
    result = run("""
        import json, sys
        import textual.types
        real = sys.modules["textual.types"]
        from gpumix.cli.lazy_textual_types import install_lazy_textual_types
        print(json.dumps({"installed": install_lazy_textual_types(), "same": sys.modules["textual.types"] is real}))
    """)
    assert result == {"installed": False, "same": True}
