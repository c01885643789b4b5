"""Modules Textual imports as it loads but the dashboard never calls, loaded on first use (issue 13: RSS).

- `platformdirs` (~0.4 MB with its Unix backend): `textual.app` imports `user_downloads_path` for the one place
  it saves a file the app delivers (App.deliver_binary), which gpumix-top never calls;
- `uuid` with `platform` (~0.2 MB): `textual.notifications` imports `uuid4` for a notification's id, and
  `textual.app` uuid for deliver_binary; a notification (a toast) or a new plan's id loads it;
- `difflib` (~0.1 MB): `textual.suggestions` imports `get_close_matches` to suggest a name in a CSS error
  ("did you mean ...?"), which the app's own CSS never raises;
- `mimetypes` (~0.1 MB): `textual.app` imports it for deliver_binary/deliver_text's file types;
- `typing_extensions` (~0.35 MB): Textual imports Final, Literal, Self, TypeAlias, TypeGuard, Protocol,
  runtime_checkable, TypedDict and ParamSpec from it, for type hints. The stand-in answers these with `typing`'s
  own (the same objects for the first five; for the others, the standard library's versions of the same, which
  Textual uses only for hints, a TypedDict (a dict at run time) and isinstance checks against one protocol
  of one method, `blend`).
  A name `typing` lacks (Self before Python 3.11) or any other name loads the real module;
- Rich's Table, Panel, Padding and Tree and Textual's CSS help texts (~0.3 MB with rich.box): Textual imports them
  to show a CSS error, its design table and a DOM tree (`textual.css.tokenizer`, `stylesheet`, `_styles_builder`,
  `_style_properties`, `design`, `dom`, DataTable's padded cell, which the dashboard's table draws by hand), which
  the app's own CSS never raises and it never draws. Their names are forwarded to those modules only (FORWARDED_TO),
  any other reader gets the real module. Installed without importing their packages (Textual's package imports
  its CSS modules as it loads);
- `textual.canvas` with its box-drawing table (~0.13 MB): `textual.layout` draws a container's keylines on it
  (CSS `keyline`), which the dashboard never sets.

Installed before Textual loads, each is a stand-in module: the functions named here call the real ones, and any
other name loads the real module, which then takes its own place in sys.modules (a later import gets it).
Importing this module installs them: only the interactive monitor does (tui/main.py, before it imports the
app and Textual), so that replay, an embedding program or a test importing the app sees the modules as they
are. Nothing is installed for a module that has loaded already.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
import types
import typing
from collections.abc import Callable
from typing import Any

# module -> the names others import from it as Textual loads (forwarded until the real module loads)
STAND_INS: dict[str, tuple[str, ...]] = {
    "platformdirs": ("user_downloads_path",), "uuid": ("uuid4",), "difflib": ("get_close_matches",),
    "mimetypes": (),  # (): the module only
    "rich.table": ("Table",), "rich.panel": ("Panel",), "rich.padding": ("Padding",), "rich.tree": ("Tree",),
    "textual.canvas": ("Canvas", "Rectangle"),
    "textual.css._help_renderables": ("HelpText", "Bullet", "Example"),
    "textual.css._help_text": (
        "align_help_text", "border_property_help_text", "color_property_help_text", "dock_property_help_text",
        "expand_help_text", "fractional_property_help_text", "integer_help_text", "keyline_help_text",
        "layout_property_help_text", "offset_property_help_text", "offset_single_axis_help_text", "position_help_text",
        "property_invalid_value_help_text", "scalar_help_text", "scrollbar_size_property_help_text",
        "scrollbar_size_single_axis_help_text", "spacing_invalid_value_help_text",
        "spacing_wrong_number_of_values_help_text", "split_property_help_text", "string_enum_help_text",
        "style_flags_property_help_text", "table_rows_or_columns_help_text", "text_align_help_text")}
# module -> the only modules its names are forwarded to (each calls them, nothing more: a class's forwarder
# builds an instance but has no classmethods); any other reader (rich.syntax's Padding.unpack, rich.scope's
# Table.grid in a traceback) gets the real module's
FORWARDED_TO: dict[str, tuple[str, ...]] = {
    "rich.table": ("textual.design",), "rich.panel": ("textual.css.tokenizer", "textual.css.stylesheet"),
    "rich.padding": ("textual.css.tokenizer", "textual.css.stylesheet", "textual.design", "textual.widgets._data_table"),
    "rich.tree": ("textual.dom",), "textual.canvas": ("textual.layout",),
    "textual.css._help_renderables": ("textual.css._help_text", "textual.css._styles_builder", "textual.css.errors",
                                      "textual.css.model", "textual.css.parse")}
_lock = threading.RLock()


class StandInModule(types.ModuleType):
    """Stands for a module until a name other than its forwarded functions is read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (__path__) load nothing
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        forwarders = vars(self).get("_forwarders", {})
        if name in forwarders and "_real" not in vars(self):  # `from MODULE import NAME` in the reader's frame
            if sys._getframe(1).f_globals.get("__name__") in FORWARDED_TO[self.__name__]:
                return forwarders[name]
        return getattr(load_real(self), name)


def load_real(stand_in: StandInModule) -> types.ModuleType:
    """The real module, loaded once into sys.modules in the stand-in's place, through the import system (its
    per-module lock: a thread importing it meanwhile waits for the whole module, as with any import)."""
    with _lock:
        real = vars(stand_in).get("_real")
        if real is not None:
            return real  # type: ignore[no-any-return]
        name = stand_in.__name__
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        try:
            real = importlib.import_module(name)
        except BaseException:
            sys.modules.setdefault(name, stand_in)
            raise
        stand_in._real = real
        return real


def _forwarder(stand_in: StandInModule, name: str) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return getattr(load_real(stand_in), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__doc__ = f"{stand_in.__name__}.{name}, loaded on first use"
    return forward


def find_spec_unimported(name: str) -> importlib.machinery.ModuleSpec | None:
    """importlib.util.find_spec without importing NAME's parent packages where they have not loaded."""
    parent_name = name.rpartition(".")[0]
    if not parent_name or parent_name in sys.modules:
        return importlib.util.find_spec(name)
    parent = find_spec_unimported(parent_name)
    if parent is None or parent.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(parent.submodule_search_locations))


def install_stand_in(name: str, functions: tuple[str, ...]) -> bool:
    """Put a stand-in for NAME in sys.modules; True when installed. Nothing (False) when NAME has loaded or
    cannot be found."""
    if name in sys.modules:
        return False
    try:
        spec = find_spec_unimported(name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None:
        return False
    stand_in = StandInModule(name)
    stand_in.__spec__ = spec  # find_spec(NAME) answers as for the real module
    if spec.submodule_search_locations is not None:  # a package: its submodules import as usual
        stand_in.__path__ = list(spec.submodule_search_locations)
    if name in FORWARDED_TO:  # given out by __getattr__, to the modules named only
        stand_in._forwarders = {function: _forwarder(stand_in, function) for function in functions}
    else:
        for function in functions:
            setattr(stand_in, function, _forwarder(stand_in, function))
    sys.modules[name] = stand_in
    return True


# module -> names answered with `typing`'s objects of the same name, where this Python's typing has them
TYPING_STAND_INS: dict[str, tuple[str, ...]] = {
    "typing_extensions": ("Final", "Literal", "Self", "TypeAlias", "TypeGuard", "Protocol", "runtime_checkable",
                          "TypedDict", "ParamSpec")}


def install_typing_stand_in(name: str, names: tuple[str, ...]) -> bool:
    """A stand-in for NAME whose NAMES are `typing`'s; True when installed (see install_stand_in)."""
    if not install_stand_in(name, ()):
        return False
    stand_in = sys.modules[name]
    for alias in names:
        if hasattr(typing, alias):
            setattr(stand_in, alias, getattr(typing, alias))
    return True


INSTALLED = {name: install_stand_in(name, functions) for name, functions in STAND_INS.items()}
INSTALLED.update({name: install_typing_stand_in(name, names) for name, names in TYPING_STAND_INS.items()})
