"""A stand-in module: in sys.modules for a module not yet loaded, it loads the real one when a name of it is read
(issue 13: RSS). Used by gpumix.cli.lazy_stand_ins (what Textual imports and the dashboard never calls) and
gpumix.cli.lazy_archivers (shutil's archivers)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

_lock = threading.RLock()


class StandInModule(types.ModuleType):
    """Stands for a module until a name other than its forwarded functions is read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (__path__) load nothing
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        forwarders = vars(self).get("_forwarders", {})
        if name in forwarders and "_real" not in vars(self):  # `from MODULE import NAME` in the reader's frame
            if sys._getframe(1).f_globals.get("__name__") in vars(self).get("_forward_to", ()):
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


def install_stand_in(name: str, functions: tuple[str, ...], forward_to: tuple[str, ...] | None = None) -> bool:
    """Put a stand-in for NAME in sys.modules, its FUNCTIONS forwarded to the real ones (to the modules named in
    FORWARD_TO only, if given: a class's forwarder builds an instance but has no classmethods, and any other
    reader gets the real module's); True when installed. Nothing (False) when NAME has loaded or cannot be found."""
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
    if forward_to is not None:  # given out by __getattr__, to the modules named only
        stand_in._forward_to = forward_to
        stand_in._forwarders = {function: _forwarder(stand_in, function) for function in functions}
    else:
        for function in functions:
            setattr(stand_in, function, _forwarder(stand_in, function))
    sys.modules[name] = stand_in
    return True
