"""Rich's Table, Panel, Padding, Tree and Textual's CSS help texts load on first use (gpumix/cli/lazy_stand_ins.py;
issue 13: the dashboard's RSS): a CSS error still shows its help, a DOM tree and a padded cell still draw, and the
stand-ins go in without importing Textual's package. Each in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run(code: str) -> dict:
    """The last line of CODE's output, as JSON; a line before it, if any, under "first"."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                            cwd="/", env={"PATH": "/usr/bin:/bin", "TERM": "xterm-256color"})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    return {**json.loads(lines[-1]), "first": json.loads(lines[0]) if len(lines) > 1 else None}


SHOW = """
    LAZY
    import io, json, sys
    import textual.app
    print(json.dumps(sorted({type(sys.modules.get(n)).__name__ for n in ("rich.panel", "rich.tree", "rich.padding")})))
    from rich.console import Console
    from textual.css.stylesheet import Stylesheet, StylesheetParseError
    from textual.dom import DOMNode
    from rich.padding import Padding
    sheet = Stylesheet()
    sheet.add_source("Screen { colr: red; width: 1x; }", read_from=("app.tcss", ""))
    try:
        sheet.parse()
        shown = "no error"
    except StylesheetParseError as error:
        console = Console(file=io.StringIO(), width=100, color_system=None)
        console.print(error.errors)
        shown = console.file.getvalue()
    console = Console(file=io.StringIO(), width=60, color_system=None)
    console.print(DOMNode().tree)
    console.print(Padding("cell", (0, 2)))
    from rich.traceback import Traceback  # Table.grid, Panel, Padding.unpack: the real classes, not forwarders
    try:
        {}["missing"]
    except KeyError:
        console.print(Traceback(show_locals=True, locals_hide_sunder=True, width=60))
    print(json.dumps({"shown": shown, "tree": console.file.getvalue(),
                      "kinds": sorted({type(sys.modules[n]).__name__ for n in ("rich.panel", "rich.tree", "rich.padding")})}))
"""


def test_a_css_error_a_tree_a_padded_cell_and_a_traceback_show_as_without_the_stand_ins() -> None:
    lazy = run(textwrap.dedent(SHOW).replace("LAZY", "import gpumix.cli.lazy_stand_ins; del gpumix"))
    real = run(textwrap.dedent(SHOW).replace("LAZY", "pass"))
    assert lazy["shown"] == real["shown"] and "Did you mean 'color'" in real["shown"] and "width" in real["shown"]
    assert lazy["tree"] == real["tree"] and "DOMNode" in real["tree"] and "  cell" in real["tree"]
    assert "KeyError" in real["tree"] and "missing" in real["tree"]
    assert lazy["first"] == ["StandInModule"]  # before their first use
    assert lazy["kinds"] == real["kinds"] == ["module"]  # the real modules, loaded on first use


def test_the_stand_ins_go_in_before_textuals_package_loads() -> None:
    outcome = run("""
        import json, sys
        import gpumix.cli.lazy_stand_ins
        before = sorted(n for n in ("textual", "textual.css", "rich") if n in sys.modules)
        import gpumix.tui.app
        kinds = {n: type(sys.modules[n]).__name__ for n in ("rich.table", "rich.panel", "rich.padding", "rich.tree",
                                                           "textual.css._help_text", "textual.css._help_renderables")}
        print(json.dumps({"before": before, "kinds": kinds, "box": "rich.box" in sys.modules}))
    """)
    assert outcome["before"] == [] and outcome["box"] is False
    assert set(outcome["kinds"].values()) == {"StandInModule"}
