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

Installed before Textual loads, each is a stand-in module (gpumix.cli.stand_in): the functions named here call the real ones, and any
other name loads the real module, which then takes its own place in sys.modules (a later import gets it).
Importing this module installs them: only the interactive monitor does (tui/main.py, before it imports the
app and Textual), so that replay, an embedding program or a test importing the app sees the modules as they
are. Nothing is installed for a module that has loaded already.
"""

from __future__ import annotations

import sys
import typing

from gpumix.cli.stand_in import StandInModule, find_spec_unimported, install_stand_in, load_real

__all__ = ["INSTALLED", "STAND_INS", "StandInModule", "find_spec_unimported", "install_stand_in", "load_real"]

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


INSTALLED = {name: install_stand_in(name, functions, FORWARDED_TO.get(name)) for name, functions in STAND_INS.items()}
INSTALLED.update({name: install_typing_stand_in(name, names) for name, names in TYPING_STAND_INS.items()})
