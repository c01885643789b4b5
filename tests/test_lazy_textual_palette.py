"""Textual's command palette loaded when it first opens (gpumix/cli/lazy_textual_palette.py; issue 13: RSS).

The dashboard starts without the palette's widgets; ctrl+p still opens the real palette and changes the theme,
after which every name is the real module's; line numbers stay the file's; a Textual whose source is not as
expected loads as usual. Each in a fresh interpreter: what loads depends on what loaded before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from gpumix.cli.lazy_textual_palette import SPLIT_AT, WIDGET_IMPORTS, split_source
from tests.palette_flow import after_theme_change

REPO = Path(__file__).resolve().parent.parent
PALETTE_WIDGETS = ("textual.widgets._input", "textual.widgets._option_list", "textual.widgets._button",
                   "textual.widgets._loading_indicator")


def run(code: str) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_dashboard_starts_without_the_palettes_widgets() -> None:
    loaded = run("""
        import json, sys
        import gpumix.tui.app, gpumix.tui.main
        import textual.app
        print(json.dumps({"stand_in": textual.app.CommandPalette.__name__,
                          "loaded": [name for name in WIDGETS if name in sys.modules]}))
    """.replace("WIDGETS", repr(PALETTE_WIDGETS)))
    assert loaded == {"stand_in": "_PaletteStandIn", "loaded": []}


def test_ctrl_p_opens_the_real_palette_and_changes_the_theme() -> None:
    outcome = run(after_theme_change(
        """{"opened": [opened.__name__, opened is textual.command.CommandPalette], "theme": app.theme,
                "app_name_real": textual.app.CommandPalette is textual.command.CommandPalette,
                "provider": issubclass(textual.theme.ThemeProvider, textual.command.Provider),
                "command": textual.command.Command.__module__}""",
        imports="import textual.app, textual.command, textual.theme"))
    assert outcome == {"opened": ["CommandPalette", True], "theme": "nord", "app_name_real": True,
                       "provider": True, "command": "textual.command"}


def test_line_numbers_are_the_files() -> None:
    lines = run("""
        import json, sys
        import gpumix.tui.app
        import textual.command as command
        source = open(command.__file__, encoding="utf-8").read().splitlines()
        palette_at = next(i for i, line in enumerate(source, 1) if line.startswith("class CommandPalette("))
        compose_at = next(i for i, line in enumerate(source, 1) if i > palette_at and "def compose(" in line)
        provider_at = next(i for i, line in enumerate(source, 1) if line.startswith("class Provider("))
        init_at = next(i for i, line in enumerate(source, 1) if i > provider_at and "def __init__(" in line)
        print(json.dumps({"head": [command.Provider.__init__.__code__.co_firstlineno, init_at],
                          "rest": [command.CommandPalette.compose.__code__.co_firstlineno, compose_at],
                          "lazy_before": "__gpumix_rest__" not in vars(command)}))
    """)
    assert lines["head"][0] == lines["head"][1]
    assert lines["rest"][0] == lines["rest"][1]
    assert lines["lazy_before"]  # reading CommandPalette.compose loaded the rest


def test_an_unexpected_source_is_not_split() -> None:
    good = "from __future__ import annotations\n" + "".join(WIDGET_IMPORTS) + "X = 1\n" + SPLIT_AT + "    pass\n"
    parts = split_source(good)
    assert parts is not None
    head, rest = parts
    assert head.count("\n") == good.split(SPLIT_AT)[0].count("\n")  # same lines
    assert not any(line in head for line in WIDGET_IMPORTS) and all(line in rest for line in WIDGET_IMPORTS)
    assert rest.splitlines().index("class Command(Option):") == good.splitlines().index("class Command(Option):")
    assert split_source(good.replace(SPLIT_AT, "\nclass Command(Option):\n")) is None
    assert split_source(good.replace(WIDGET_IMPORTS[0], "")) is None
    assert split_source(good + SPLIT_AT) is None


def test_nothing_is_installed_once_textual_app_has_loaded() -> None:
    result = run("""
        import json, sys
        import textual.app
        from gpumix.cli.lazy_textual_palette import install_lazy_palette
        print(json.dumps({"installed": install_lazy_palette(),
                          "real": textual.app.CommandPalette is sys.modules["textual.command"].CommandPalette}))
    """)
    assert result == {"installed": False, "real": True}
