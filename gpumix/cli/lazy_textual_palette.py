"""Textual's command palette loaded when it first opens (issue 13: RSS <= nvitop's + 10 MB).

`textual.app` and `textual.theme` import `textual.command` as they load: the palette's screen, its input
(Input with its suggester and validation), its list (OptionList), LoadingIndicator and Button, ~1 MB of RSS
for a screen that ctrl+p opens, if ever. Installed before Textual loads, `textual.command` runs its source in
two parts: what the rest of Textual names at import (Hit, DiscoveryHit, Hits, Provider, SimpleProvider,
CommandListItem: they need no widget), then, at the first use of anything else, the widgets' imports and the
palette's classes, into the same module (every name is then the module's own). `textual.app` holds a stand-in
for CommandPalette until then: constructing it, or asking `is_open`, loads the palette and answers as the real
class; `textual.app`'s name is then rebound to the real class.

Only for the Textual whose source is as expected (the split line and the widget imports each found once);
anything else loads textual.command as usual. Importing this module installs it (tui/app.py imports it before
Textual).
"""

from __future__ import annotations
import __future__

import importlib.util
import sys
import threading
import types
from typing import Any

import gpumix.cli.lazy_textual_types  # noqa: F401  (installs first: the palette's first part imports textual.types)

NAME = "textual.command"
# The first statement that needs a widget: everything above it is the part Textual names at import.
SPLIT_AT = "\n@rich.repr.auto\n@total_ordering\nclass Command(Option):\n"
WIDGET_IMPORTS = ("from textual.widgets import Button, Input, LoadingIndicator, OptionList, Static\n",
                  "from textual.widgets.option_list import Option\n")
MAX_SOURCE_BYTES = 1 << 20  # textual/command.py is ~45 kB
_lock = threading.Lock()


class _PaletteStandIn:
    """textual.app's CommandPalette until the palette loads: builds the real one, answers is_open."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _load_rest().CommandPalette(*args, **kwargs)

    @staticmethod
    def is_open(app: Any) -> bool:
        return bool(_load_rest().CommandPalette.is_open(app))


def split_source(source: str) -> tuple[str, str] | None:
    """(the part without widgets, the rest with the widgets' imports), each compiled at its own lines of the
    file (tracebacks name the right line); None when the source is not as expected."""
    if source.count(SPLIT_AT) != 1 or any(source.count(line) != 1 for line in WIDGET_IMPORTS):
        return None
    head, tail = source.split(SPLIT_AT)
    if any(line not in head for line in WIDGET_IMPORTS):
        return None
    for line in WIDGET_IMPORTS:
        head = head.replace(line, "\n")  # the same count of lines
    head_lines = head.count("\n")
    if head_lines < len(WIDGET_IMPORTS):
        return None
    rest = "\n" * (head_lines - len(WIDGET_IMPORTS)) + "".join(WIDGET_IMPORTS) + SPLIT_AT + tail
    return head, rest


def _module() -> types.ModuleType:
    return sys.modules[NAME]


def _load_rest() -> types.ModuleType:
    """Run the palette's part into textual.command (once); rebind textual.app's CommandPalette."""
    module = _module()
    with _lock:
        rest = vars(module).pop("__gpumix_rest__", None)
        if rest is not None:  # compiled here, not at start: ~2/3 of the file's compile time (~25 ms)
            code = compile(rest, module.__file__ or NAME, "exec", flags=__future__.annotations.compiler_flag,
                           dont_inherit=True)
            exec(code, vars(module))  # noqa: S102 - Textual's own source, from its file
            app = sys.modules.get("textual.app")
            if app is not None and vars(app).get("CommandPalette") is _PaletteStandIn:
                app.CommandPalette = module.CommandPalette
    return module


def _getattr(name: str) -> Any:
    """textual.command's module __getattr__ (PEP 562): a name of the palette's part loads it; textual.app's own
    import of CommandPalette, alone, gets the stand-in."""
    if name.startswith("__"):
        raise AttributeError(f"module {NAME!r} has no attribute {name!r}")
    if name == "CommandPalette" and "__gpumix_rest__" in vars(_module()):
        if sys._getframe(1).f_globals.get("__name__") == "textual.app":  # its `from textual.command import ...`
            return _PaletteStandIn
    namespace = vars(_load_rest())
    if name in namespace:
        return namespace[name]
    raise AttributeError(f"module {NAME!r} has no attribute {name!r}")


def install_lazy_palette() -> bool:
    """Put the two-part textual.command in sys.modules before Textual loads; True when installed. Nothing
    (False) once Textual's app, theme or command has loaded, or when its source is not as expected."""
    if any(name in sys.modules for name in (NAME, "textual.app", "textual.theme")):
        return False
    try:
        spec = importlib.util.find_spec(NAME)  # imports the light textual package only
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        with open(spec.origin, encoding="utf-8") as file:
            source = file.read(MAX_SOURCE_BYTES + 1)
    except (OSError, UnicodeDecodeError):
        return False
    parts = None if len(source) > MAX_SOURCE_BYTES else split_source(source)
    if parts is None:
        return False
    try:
        head = compile(parts[0], spec.origin, "exec", dont_inherit=True)  # with the file's __future__ import
    except SyntaxError:
        return False
    module = importlib.util.module_from_spec(spec)
    namespace = vars(module)
    namespace["__gpumix_rest__"] = parts[1]  # its source; compiled with the file's __future__ flag when used
    namespace["__getattr__"] = _getattr
    sys.modules[NAME] = module
    try:
        exec(head, namespace)  # noqa: S102 - Textual's own source, compiled from its file
    except Exception:  # noqa: BLE001 - Textual then loads textual.command as usual
        del sys.modules[NAME]
        return False
    sys.modules["textual"].command = module
    return True


INSTALLED = install_lazy_palette()
