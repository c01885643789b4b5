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
  A name `typing` lacks (Self before Python 3.11) or any other name loads the real module.

Installed before Textual loads, each is a stand-in module: the functions named here call the real ones, and any
other name loads the real module, which then takes its own place in sys.modules (a later import gets it).
Importing this module installs them: only the interactive monitor does (tui/main.py, before it imports the
app and Textual), so that replay, an embedding program or a test importing the app sees the modules as they
are. Nothing is installed for a module that has loaded already.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
import typing
from collections.abc import Callable
from typing import Any

# module -> the names others import from it as Textual loads (forwarded until the real module loads)
STAND_INS: dict[str, tuple[str, ...]] = {"platformdirs": ("user_downloads_path",), "uuid": ("uuid4",),
                                          "difflib": ("get_close_matches",), "mimetypes": ()}  # (): the module only
_lock = threading.RLock()


class StandInModule(types.ModuleType):
    """Stands for a module until a name other than its forwarded functions is read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (__path__) load nothing
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
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


def install_stand_in(name: str, functions: tuple[str, ...]) -> bool:
    """Put a stand-in for NAME in sys.modules; True when installed. Nothing (False) when NAME has loaded or
    cannot be found."""
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None:
        return False
    stand_in = StandInModule(name)
    stand_in.__spec__ = spec  # find_spec(NAME) answers as for the real module
    if spec.submodule_search_locations is not None:  # a package: its submodules import as usual
        stand_in.__path__ = list(spec.submodule_search_locations)
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
