"""`textual.types` loaded on first use of a name it re-exports (issue 13: RSS <= nvitop's + 10 MB).

Textual's command palette (`textual.command`, loaded with `textual.app`) imports one callback alias from
`textual.types`, a module of re-exports that loads five widgets the dashboard never shows (DirectoryTree and
its Tree, Select, Placeholder, and Input's validation): ~0.55 MB of RSS at -OO. Installed before Textual
loads, `textual.types` is a module that answers the aliases from `textual._types`, where they are defined,
and loads the real `textual.types` at the first other name (then every name is the real module's). The
palette (ctrl+p) works as before: it only annotates with the alias.

Importing this module installs it (tui/app.py imports it before Textual); install_lazy_textual_types() is a
no-op once textual.types or the palette has loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

NAME = "textual.types"
LIGHT_MODULE = "textual._types"  # where the aliases textual.types re-exports are defined


class LazyTextualTypes(types.ModuleType):
    """Stands for textual.types: a name defined in textual._types from there, any other from the real module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__all__":  # the import system's probes (__path__): no load
            raise AttributeError(f"module {NAME!r} has no attribute {name!r}")
        light = importlib.import_module(LIGHT_MODULE)
        if name in vars(light):
            value = vars(light)[name]
            setattr(self, name, value)
            return value
        real = self._load_real()
        if name in vars(real):
            return vars(real)[name]
        raise AttributeError(f"module {NAME!r} has no attribute {name!r}")

    def _load_real(self) -> types.ModuleType:
        real = vars(self).get("_real_module")
        if real is None:
            spec = self.__spec__
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {NAME}")
            real = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(real)  # its own module object: sys.modules keeps this one
            for key, value in vars(real).items():
                if not key.startswith("__") or key == "__all__":
                    setattr(self, key, value)
            self._real_module = real
        return real

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(vars(self._load_real())))


def install_lazy_textual_types() -> bool:
    """Put the lazy textual.types in sys.modules; True when installed. Nothing (False) when textual.types or
    the palette that imports it is already loaded, or Textual cannot be found."""
    if NAME in sys.modules or "textual.command" in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(NAME)  # imports the textual package only (light), not textual.types
    except (ImportError, ValueError):
        return False
    if spec is None or spec.loader is None or NAME in sys.modules:
        return False
    module = LazyTextualTypes(NAME)
    module.__spec__ = spec
    module.__file__ = spec.origin
    module.__loader__ = spec.loader
    module.__package__ = "textual"
    sys.modules[NAME] = module
    sys.modules["textual"].types = module  # `import textual.types; textual.types.X` finds it
    return True


INSTALLED = install_lazy_textual_types()
