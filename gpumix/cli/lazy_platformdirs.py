"""platformdirs loaded on first use (issue 13: RSS <= nvitop's + 10 MB).

`textual.app` imports `user_downloads_path` from platformdirs as it loads, for the one place it saves a file
the app delivers (App.deliver_binary, a screenshot to the downloads folder), which gpumix-top never calls:
platformdirs with its Unix backend is ~0.4 MB of RSS. Installed before Textual loads, `platformdirs` is a
stand-in whose user_downloads_path calls the real one, and whose any other name loads the real package (it
then takes its own place in sys.modules). Importing this module installs it (tui/app.py imports it before
Textual); nothing is installed once platformdirs has loaded.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

NAME = "platformdirs"
_lock = threading.Lock()


class LazyPlatformdirs(types.ModuleType):
    """Stands for platformdirs until a name other than user_downloads_path is read."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's probes (__path__) load nothing
            raise AttributeError(f"module {NAME!r} has no attribute {name!r}")
        return getattr(load_real(self), name)


def load_real(stand_in: LazyPlatformdirs) -> types.ModuleType:
    """The real platformdirs, loaded once into sys.modules in the stand-in's place."""
    with _lock:
        real = vars(stand_in).get("_real")
        if real is not None:
            return real  # type: ignore[no-any-return]
        spec: ModuleSpec = vars(stand_in)["_spec"]
        real = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = real  # its submodules import `platformdirs` (relative and absolute)
        try:
            spec.loader.exec_module(real)  # type: ignore[union-attr]
        except BaseException:
            sys.modules[NAME] = stand_in
            raise
        stand_in._real = real
        return real


def install_lazy_platformdirs() -> bool:
    """Put the stand-in in sys.modules; True when installed. Nothing (False) when platformdirs has loaded or
    cannot be found."""
    if NAME in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(NAME)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    stand_in = LazyPlatformdirs(NAME)
    stand_in._spec = spec

    def user_downloads_path() -> Path:
        """The real platformdirs.user_downloads_path (loads platformdirs)."""
        return load_real(stand_in).user_downloads_path()  # type: ignore[no-any-return]

    stand_in.user_downloads_path = user_downloads_path
    sys.modules[NAME] = stand_in
    return True


INSTALLED = install_lazy_platformdirs()
